//! Internal macros: PRM layout modules and byte (de)serialization of `#[repr(C)]` structs.

/// Declares one PRM layout module: `SIZE`, one [`crate::Field`] per row and a `FIELDS` table.
///
/// Every field gets an automatic doc line with its position, so rows need no hand-written doc;
/// a `///` before a row adds the PRM meaning. Items after the `fields { }` block are placed in
/// the module as they are (encodings, aliases).
macro_rules! layout {
    (
        $(#[$m:meta])*
        pub mod $name:ident : size $size:expr;
        fields {
            $(
                $(#[$fm:meta])*
                $fname:ident = $kind:ident ( $($arg:expr),* );
            )*
        }
        $($extra:item)*
    ) => {
        $(#[$m])*
        pub mod $name {
            #[allow(unused_imports)]
            use crate::field::Field;

            /// Size of the layout in bytes (for a layout that ends in a flexible array: the
            /// fixed part, i.e. the offset of the array).
            pub const SIZE: usize = $size;

            $(
                $(#[$fm])*
                #[doc = concat!("\n\nPRM position: `", stringify!($kind), "(", stringify!($($arg),*), ")`.")]
                pub const $fname: Field = Field::$kind($($arg),*);
            )*

            /// Every field of this layout as `(NAME, field)`, in PRM table order (for tables,
            /// logs and tests). Flexible arrays have width 0.
            pub const FIELDS: &[(&str, Field)] = &[$((stringify!($fname), $fname),)*];

            $($extra)*
        }
    };
}

/// Declares one little-endian layout module (the EFA contract): `SIZE`, one
/// [`crate::LeField`] per row and a `FIELDS` table, like [`layout!`] does for mlx5.
macro_rules! le_layout {
    (
        $(#[$m:meta])*
        pub mod $name:ident : size $size:expr;
        fields {
            $(
                $(#[$fm:meta])*
                $fname:ident = $kind:ident ( $($arg:expr),* );
            )*
        }
        $($extra:item)*
    ) => {
        $(#[$m])*
        pub mod $name {
            #[allow(unused_imports)]
            use crate::field::LeField;

            /// Size of the layout in bytes.
            pub const SIZE: usize = $size;

            $(
                $(#[$fm])*
                #[doc = concat!("\n\nPosition: `", stringify!($kind), "(", stringify!($($arg),*), ")`.")]
                pub const $fname: LeField = LeField::$kind($($arg),*);
            )*

            /// Every field of this layout as `(NAME, field)`, in table order.
            pub const FIELDS: &[(&str, LeField)] = &[$((stringify!($fname), $fname),)*];

            $($extra)*
        }
    };
}

/// A fixed-size device structure that can be copied to and from its byte image.
pub(crate) trait Raw: Sized {
    fn put(&self, out: &mut [u8]);
    fn take(src: &[u8]) -> Self;
}

impl Raw for u8 {
    fn put(&self, out: &mut [u8]) {
        out[0] = *self;
    }
    fn take(src: &[u8]) -> Self {
        src[0]
    }
}

impl<const N: usize> Raw for [u8; N] {
    fn put(&self, out: &mut [u8]) {
        out[..N].copy_from_slice(self);
    }
    fn take(src: &[u8]) -> Self {
        let mut a = [0u8; N];
        a.copy_from_slice(&src[..N]);
        a
    }
}

macro_rules! raw_be {
    ($($t:ident),*) => {$(
        impl Raw for crate::field::$t {
            fn put(&self, out: &mut [u8]) {
                self.0.put(out)
            }
            fn take(src: &[u8]) -> Self {
                crate::field::$t(Raw::take(src))
            }
        }
    )*};
}
raw_be!(Be16, Be32, Be64, Le16, Le32, Le64);

/// Implements `SIZE`, `to_bytes`, `from_bytes` and `read_from` for a `#[repr(C)]` struct made
/// only of `u8`, `[u8; N]`, `BeNN` and `LeNN` fields (listed in declaration order), and checks at compile
/// time that the fields add up to `SIZE` and to `size_of`.
macro_rules! raw_struct {
    ($t:ident, $size:expr, [$($f:ident),* $(,)?]) => {
        impl $t {
            /// Size of the structure in bytes.
            pub const SIZE: usize = $size;

            /// The byte image of the structure, as the device sees it.
            pub fn to_bytes(&self) -> [u8; $size] {
                let mut out = [0u8; $size];
                $(
                    crate::macros::Raw::put(&self.$f, &mut out[core::mem::offset_of!($t, $f)..]);
                )*
                out
            }

            /// The structure from its byte image.
            pub fn from_bytes(src: &[u8; $size]) -> Self {
                $t {
                    $($f: crate::macros::Raw::take(&src[core::mem::offset_of!($t, $f)..]),)*
                }
            }

            /// The structure from the first `SIZE` bytes of `src`; `None` if `src` is shorter.
            pub fn read_from(src: &[u8]) -> Option<Self> {
                let b: &[u8; $size] = src.get(..$size)?.try_into().ok()?;
                Some(Self::from_bytes(b))
            }

            /// Writes the byte image into the first `SIZE` bytes of `dst`; `false` (nothing
            /// written) if `dst` is shorter.
            pub fn write_to(&self, dst: &mut [u8]) -> bool {
                match dst.get_mut(..$size) {
                    Some(d) => {
                        d.copy_from_slice(&self.to_bytes());
                        true
                    }
                    None => false,
                }
            }
        }

        const _: () = assert!(core::mem::size_of::<$t>() == $size);
    };
}
