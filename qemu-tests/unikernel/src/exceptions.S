// CPU exception entry stubs (vectors 0-31): push a zero for vectors without an error
// code, push the vector, then the common path calls uk_exception(vector, error, frame).
// Every gate runs on IST1 (idt.rs), so the interrupted code's red zone is never touched.

.section .text
uk_exc_0:
    push 0
    push 0
    jmp uk_exc_common
uk_exc_1:
    push 0
    push 1
    jmp uk_exc_common
uk_exc_2:
    push 0
    push 2
    jmp uk_exc_common
uk_exc_3:
    push 0
    push 3
    jmp uk_exc_common
uk_exc_4:
    push 0
    push 4
    jmp uk_exc_common
uk_exc_5:
    push 0
    push 5
    jmp uk_exc_common
uk_exc_6:
    push 0
    push 6
    jmp uk_exc_common
uk_exc_7:
    push 0
    push 7
    jmp uk_exc_common
uk_exc_8:
    push 8
    jmp uk_exc_common
uk_exc_9:
    push 0
    push 9
    jmp uk_exc_common
uk_exc_10:
    push 10
    jmp uk_exc_common
uk_exc_11:
    push 11
    jmp uk_exc_common
uk_exc_12:
    push 12
    jmp uk_exc_common
uk_exc_13:
    push 13
    jmp uk_exc_common
uk_exc_14:
    push 14
    jmp uk_exc_common
uk_exc_15:
    push 0
    push 15
    jmp uk_exc_common
uk_exc_16:
    push 0
    push 16
    jmp uk_exc_common
uk_exc_17:
    push 17
    jmp uk_exc_common
uk_exc_18:
    push 0
    push 18
    jmp uk_exc_common
uk_exc_19:
    push 0
    push 19
    jmp uk_exc_common
uk_exc_20:
    push 0
    push 20
    jmp uk_exc_common
uk_exc_21:
    push 21
    jmp uk_exc_common
uk_exc_22:
    push 0
    push 22
    jmp uk_exc_common
uk_exc_23:
    push 0
    push 23
    jmp uk_exc_common
uk_exc_24:
    push 0
    push 24
    jmp uk_exc_common
uk_exc_25:
    push 0
    push 25
    jmp uk_exc_common
uk_exc_26:
    push 0
    push 26
    jmp uk_exc_common
uk_exc_27:
    push 0
    push 27
    jmp uk_exc_common
uk_exc_28:
    push 0
    push 28
    jmp uk_exc_common
uk_exc_29:
    push 29
    jmp uk_exc_common
uk_exc_30:
    push 30
    jmp uk_exc_common
uk_exc_31:
    push 0
    push 31
    jmp uk_exc_common
uk_exc_common:
    mov rdi, [rsp]
    mov rsi, [rsp + 8]
    lea rdx, [rsp + 16]
    and rsp, -16
    call uk_exception
.Luk_exc_hang:
    hlt
    jmp .Luk_exc_hang

.section .rodata
.p2align 3
.global uk_exc_table
uk_exc_table:
    .quad uk_exc_0
    .quad uk_exc_1
    .quad uk_exc_2
    .quad uk_exc_3
    .quad uk_exc_4
    .quad uk_exc_5
    .quad uk_exc_6
    .quad uk_exc_7
    .quad uk_exc_8
    .quad uk_exc_9
    .quad uk_exc_10
    .quad uk_exc_11
    .quad uk_exc_12
    .quad uk_exc_13
    .quad uk_exc_14
    .quad uk_exc_15
    .quad uk_exc_16
    .quad uk_exc_17
    .quad uk_exc_18
    .quad uk_exc_19
    .quad uk_exc_20
    .quad uk_exc_21
    .quad uk_exc_22
    .quad uk_exc_23
    .quad uk_exc_24
    .quad uk_exc_25
    .quad uk_exc_26
    .quad uk_exc_27
    .quad uk_exc_28
    .quad uk_exc_29
    .quad uk_exc_30
    .quad uk_exc_31
