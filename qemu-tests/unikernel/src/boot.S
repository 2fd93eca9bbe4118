// PVH entry: QEMU's PVH loader jumps to _start32 in 32-bit protected mode, paging off,
// EBX = physical address of the hvm_start_info. We zero .bss, identity-map 0..4 GiB with
// 2 MiB pages, enable long mode and SSE, and call kmain(magic, start_info).

.section .note.Xen, "a"
.p2align 2
.long 4
.long 8
.long 18
.asciz "Xen"
.p2align 2
.quad _start32

.section .text.boot, "ax"
.code32
.global _start32
_start32:
    cli
    cld
    mov ebp, eax
    mov esi, ebx
    mov edi, offset __bss_start
    mov ecx, offset __bss_end
    sub ecx, edi
    xor eax, eax
    rep stosb
    mov esp, offset boot_stack_top

    mov eax, offset boot_pdpt
    or eax, 3
    mov dword ptr [boot_pml4], eax
    mov eax, offset boot_pd
    or eax, 3
    mov dword ptr [boot_pdpt], eax
    add eax, 4096
    mov dword ptr [boot_pdpt + 8], eax
    add eax, 4096
    mov dword ptr [boot_pdpt + 16], eax
    add eax, 4096
    mov dword ptr [boot_pdpt + 24], eax
    mov edi, offset boot_pd
    xor ecx, ecx
.Lpd_loop:
    mov eax, ecx
    shl eax, 21
    or eax, 0x83
    mov dword ptr [edi + ecx * 8], eax
    inc ecx
    cmp ecx, 2048
    jne .Lpd_loop

    mov eax, offset boot_pml4
    mov cr3, eax
    mov eax, cr4
    or eax, 0x620
    mov cr4, eax
    mov ecx, 0xC0000080
    rdmsr
    or eax, 0x100
    wrmsr
    mov eax, cr0
    and eax, 0xFFFFFFFB
    or eax, 0x80010022
    mov cr0, eax
    lgdt [boot_gdt_ptr]
    .byte 0xEA
    .long _start64
    .word 0x08

.p2align 3
boot_gdt:
    .quad 0
    .quad 0x00AF9A000000FFFF
    .quad 0x00CF92000000FFFF
boot_gdt_ptr:
    .word 23
    .long boot_gdt

.code64
_start64:
    mov ax, 0x10
    mov ds, ax
    mov es, ax
    mov ss, ax
    xor eax, eax
    mov fs, ax
    mov gs, ax
    mov rsp, offset boot_stack_top
    fninit
    mov edi, ebp
    mov esi, esi
    call kmain
.Lhalt:
    hlt
    jmp .Lhalt

.section .bss.boot, "aw", @nobits
.p2align 12
.global boot_pml4
boot_pml4:
    .skip 4096
boot_pdpt:
    .skip 4096
boot_pd:
    .skip 16384
boot_stack:
    .skip 1048576
boot_stack_top:
