//! What libc would provide: `memcpy` and friends (the host target's precompiled
//! `compiler_builtins` leaves them to libc), and the unwinding symbols the precompiled `alloc`
//! references even with `panic = "abort"` (never called).

/// `memcpy` with `rep movsb` (inline assembly, so it cannot be compiled into a call to
/// itself).
///
/// # Safety
///
/// `dest` and `src` are valid for `n` bytes and do not overlap.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract; the direction flag is clear (cld at entry, never set
    // except inside memmove, which clears it again).
    unsafe {
        core::arch::asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") dest => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags)
        )
    };
    dest
}

/// `memmove`: forwards, or backwards when `dest` overlaps the tail of `src`.
///
/// # Safety
///
/// `dest` and `src` are valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(dest: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if n == 0 {
        return dest;
    }
    if (dest as usize) <= (src as usize) || (dest as usize) >= (src as usize).wrapping_add(n) {
        // SAFETY: a forward copy never reads a byte it wrote (dest is below src, or disjoint).
        unsafe { memcpy(dest, src, n) };
    } else {
        // SAFETY: both ranges are valid per the caller; copying from the last byte down never
        // reads a byte already overwritten when dest > src. DF is cleared again.
        unsafe {
            core::arch::asm!(
                "std",
                "rep movsb",
                "cld",
                inout("rcx") n => _,
                inout("rdi") dest.add(n - 1) => _,
                inout("rsi") src.add(n - 1) => _,
                options(nostack)
            )
        };
    }
    dest
}

/// `memset` with `rep stosb`.
///
/// # Safety
///
/// `dest` is valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memset(dest: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the caller's contract.
    unsafe {
        core::arch::asm!(
            "rep stosb",
            inout("rcx") n => _,
            inout("rdi") dest => _,
            in("al") c as u8,
            options(nostack, preserves_flags)
        )
    };
    dest
}

/// `memcmp`, bytewise (volatile reads keep LLVM from turning the loop into a call to
/// `memcmp`).
///
/// # Safety
///
/// `a` and `b` are valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    for i in 0..n {
        // SAFETY: i < n, inside both ranges per the caller.
        let (x, y) = unsafe { (a.add(i).read_volatile(), b.add(i).read_volatile()) };
        if x != y {
            return i32::from(x) - i32::from(y);
        }
    }
    0
}

/// `bcmp`: zero iff equal.
///
/// # Safety
///
/// `a` and `b` are valid for `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { memcmp(a, b, n) }
}

/// Referenced by the precompiled `alloc`'s landing pads; never called with `panic = "abort"`.
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}

/// Referenced by the precompiled `alloc`'s landing pads; never reached with
/// `panic = "abort"`.
#[unsafe(no_mangle)]
pub extern "C" fn _Unwind_Resume() -> ! {
    crate::kprintln!("UK: _Unwind_Resume reached");
    crate::io::exit(crate::io::EXIT_PANIC)
}
