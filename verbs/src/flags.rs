//! Bit-set types with libibverbs' bit values.

/// Declares a transparent bit-set type with named constants and the usual operators.
macro_rules! bitset {
    (
        $(#[$m:meta])*
        pub struct $name:ident($ty:ty) {
            $(
                $(#[$fm:meta])*
                const $flag:ident = $value:expr;
            )*
        }
    ) => {
        $(#[$m])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        #[repr(transparent)]
        pub struct $name($ty);

        impl $name {
            $(
                $(#[$fm])*
                pub const $flag: $name = $name($value);
            )*

            /// No bit set.
            pub const fn empty() -> Self {
                $name(0)
            }

            /// Every named bit.
            pub const fn all() -> Self {
                $name(0 $(| $value)*)
            }

            /// The raw bits.
            pub const fn bits(self) -> $ty {
                self.0
            }

            /// A value from raw bits, unknown bits kept.
            pub const fn from_bits_retain(bits: $ty) -> Self {
                $name(bits)
            }

            /// Whether every bit of `other` is set in `self`.
            pub const fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }

            /// Whether any bit of `other` is set in `self`.
            pub const fn intersects(self, other: Self) -> bool {
                self.0 & other.0 != 0
            }

            /// Whether no bit is set.
            pub const fn is_empty(self) -> bool {
                self.0 == 0
            }

            /// The union of both sets.
            pub const fn union(self, other: Self) -> Self {
                $name(self.0 | other.0)
            }

            /// The bits set in both.
            pub const fn intersection(self, other: Self) -> Self {
                $name(self.0 & other.0)
            }

            /// `self` without the bits of `other`.
            pub const fn difference(self, other: Self) -> Self {
                $name(self.0 & !other.0)
            }
        }

        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, rhs: $name) -> $name {
                $name(self.0 | rhs.0)
            }
        }

        impl core::ops::BitOrAssign for $name {
            fn bitor_assign(&mut self, rhs: $name) {
                self.0 |= rhs.0;
            }
        }

        impl core::ops::BitAnd for $name {
            type Output = $name;
            fn bitand(self, rhs: $name) -> $name {
                $name(self.0 & rhs.0)
            }
        }

        impl core::ops::Not for $name {
            type Output = $name;
            fn not(self) -> $name {
                $name(!self.0)
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let mut first = true;
                write!(f, "{}(", stringify!($name))?;
                $(
                    if $value != 0 && self.0 & $value == $value {
                        if !first {
                            f.write_str(" | ")?;
                        }
                        f.write_str(stringify!($flag))?;
                        first = false;
                    }
                )*
                let rest = self.0 & !Self::all().0;
                if rest != 0 {
                    if !first {
                        f.write_str(" | ")?;
                    }
                    write!(f, "{:#x}", rest)?;
                }
                f.write_str(")")
            }
        }
    };
}

bitset! {
    /// Memory and QP access rights (`enum ibv_access_flags`).
    pub struct AccessFlags(u32) {
        /// `IBV_ACCESS_LOCAL_WRITE`: the device may write the memory for local operations
        /// (receives, RDMA read results, atomic results).
        const LOCAL_WRITE = 1 << 0;
        /// `IBV_ACCESS_REMOTE_WRITE` (requires LOCAL_WRITE on an MR).
        const REMOTE_WRITE = 1 << 1;
        /// `IBV_ACCESS_REMOTE_READ`.
        const REMOTE_READ = 1 << 2;
        /// `IBV_ACCESS_REMOTE_ATOMIC` (requires LOCAL_WRITE on an MR).
        const REMOTE_ATOMIC = 1 << 3;
    }
}

bitset! {
    /// Flags of a send work request (`enum ibv_send_flags`).
    pub struct SendFlags(u32) {
        /// `IBV_SEND_FENCE`: wait for earlier RDMA reads and atomics to complete first.
        const FENCE = 1 << 0;
        /// `IBV_SEND_SIGNALED`: generate a work completion on success.
        const SIGNALED = 1 << 1;
        /// `IBV_SEND_SOLICITED`: set the solicited-event bit.
        const SOLICITED = 1 << 2;
        /// `IBV_SEND_INLINE`: copy the payload into the work queue entry (see
        /// [`SendWr::inline_data`](crate::SendWr::inline_data)).
        const INLINE = 1 << 3;
    }
}

bitset! {
    /// Flags of a work completion (`enum ibv_wc_flags`).
    pub struct WcFlags(u32) {
        /// `IBV_WC_GRH`: the first 40 bytes of the receive buffer hold a GRH (UD).
        const GRH = 1 << 0;
        /// `IBV_WC_WITH_IMM`: `imm_data` is valid.
        const WITH_IMM = 1 << 1;
        /// `IBV_WC_IP_CSUM_OK`.
        const IP_CSUM_OK = 1 << 2;
        /// `IBV_WC_WITH_INV`: `imm_data` holds the invalidated rkey.
        const WITH_INV = 1 << 3;
    }
}

bitset! {
    /// Which [`QpAttr`](crate::QpAttr) fields a modify / query names (`enum ibv_qp_attr_mask`).
    pub struct QpAttrMask(u32) {
        /// `IBV_QP_STATE`.
        const STATE = 1 << 0;
        /// `IBV_QP_CUR_STATE`.
        const CUR_STATE = 1 << 1;
        /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`.
        const EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// `IBV_QP_ACCESS_FLAGS`.
        const ACCESS_FLAGS = 1 << 3;
        /// `IBV_QP_PKEY_INDEX`.
        const PKEY_INDEX = 1 << 4;
        /// `IBV_QP_PORT`.
        const PORT = 1 << 5;
        /// `IBV_QP_QKEY`.
        const QKEY = 1 << 6;
        /// `IBV_QP_AV`.
        const AV = 1 << 7;
        /// `IBV_QP_PATH_MTU`.
        const PATH_MTU = 1 << 8;
        /// `IBV_QP_TIMEOUT`.
        const TIMEOUT = 1 << 9;
        /// `IBV_QP_RETRY_CNT`.
        const RETRY_CNT = 1 << 10;
        /// `IBV_QP_RNR_RETRY`.
        const RNR_RETRY = 1 << 11;
        /// `IBV_QP_RQ_PSN`.
        const RQ_PSN = 1 << 12;
        /// `IBV_QP_MAX_QP_RD_ATOMIC`.
        const MAX_QP_RD_ATOMIC = 1 << 13;
        /// `IBV_QP_ALT_PATH`.
        const ALT_PATH = 1 << 14;
        /// `IBV_QP_MIN_RNR_TIMER`.
        const MIN_RNR_TIMER = 1 << 15;
        /// `IBV_QP_SQ_PSN`.
        const SQ_PSN = 1 << 16;
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`.
        const MAX_DEST_RD_ATOMIC = 1 << 17;
        /// `IBV_QP_PATH_MIG_STATE`.
        const PATH_MIG_STATE = 1 << 18;
        /// `IBV_QP_CAP`.
        const CAP = 1 << 19;
        /// `IBV_QP_DEST_QPN`.
        const DEST_QPN = 1 << 20;
    }
}
