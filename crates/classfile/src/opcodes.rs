//! Opcode constants and tables (JVMS §6.5).

pub const NOP: u8 = 0;
pub const ACONST_NULL: u8 = 1;
pub const ICONST_M1: u8 = 2;
pub const ICONST_0: u8 = 3;
pub const BIPUSH: u8 = 16;
pub const SIPUSH: u8 = 17;
pub const LDC: u8 = 18;
pub const LDC_W: u8 = 19;
pub const LDC2_W: u8 = 20;
pub const ILOAD: u8 = 21;
pub const LLOAD: u8 = 22;
pub const FLOAD: u8 = 23;
pub const DLOAD: u8 = 24;
pub const ALOAD: u8 = 25;
pub const ILOAD_0: u8 = 26;
pub const IALOAD: u8 = 46;
pub const SALOAD: u8 = 53;
pub const ISTORE: u8 = 54;
pub const ASTORE: u8 = 58;
pub const ISTORE_0: u8 = 59;
pub const IASTORE: u8 = 79;
pub const SASTORE: u8 = 86;
pub const POP: u8 = 87;
pub const POP2: u8 = 88;
pub const DUP: u8 = 89;
pub const SWAP: u8 = 95;
pub const IADD: u8 = 96;
pub const IDIV: u8 = 108;
pub const LDIV: u8 = 109;
pub const IREM: u8 = 112;
pub const LREM: u8 = 113;
pub const IINC: u8 = 132;
pub const IFEQ: u8 = 153;
pub const GOTO: u8 = 167;
pub const JSR: u8 = 168;
pub const RET: u8 = 169;
pub const TABLESWITCH: u8 = 170;
pub const LOOKUPSWITCH: u8 = 171;
pub const IRETURN: u8 = 172;
pub const RETURN: u8 = 177;
pub const GETSTATIC: u8 = 178;
pub const PUTSTATIC: u8 = 179;
pub const GETFIELD: u8 = 180;
pub const PUTFIELD: u8 = 181;
pub const INVOKEVIRTUAL: u8 = 182;
pub const INVOKESPECIAL: u8 = 183;
pub const INVOKESTATIC: u8 = 184;
pub const INVOKEINTERFACE: u8 = 185;
pub const INVOKEDYNAMIC: u8 = 186;
pub const NEW: u8 = 187;
pub const NEWARRAY: u8 = 188;
pub const ANEWARRAY: u8 = 189;
pub const ARRAYLENGTH: u8 = 190;
pub const ATHROW: u8 = 191;
pub const CHECKCAST: u8 = 192;
pub const INSTANCEOF: u8 = 193;
pub const MONITORENTER: u8 = 194;
pub const MONITOREXIT: u8 = 195;
pub const WIDE: u8 = 196;
pub const MULTIANEWARRAY: u8 = 197;
pub const IFNULL: u8 = 198;
pub const IFNONNULL: u8 = 199;
pub const GOTO_W: u8 = 200;
pub const JSR_W: u8 = 201;

/// Fixed instruction lengths; 0 marks variable-length (`tableswitch`, `lookupswitch`, `wide`) or invalid opcodes.
pub static LENGTH: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut op = 0;
    while op <= JSR_W as usize {
        t[op] = match op as u8 {
            BIPUSH | LDC | ILOAD..=ALOAD | ISTORE..=ASTORE | RET | NEWARRAY => 2,
            SIPUSH
            | LDC_W
            | LDC2_W
            | IINC
            | IFEQ..=JSR
            | GETSTATIC..=INVOKESTATIC
            | NEW
            | ANEWARRAY
            | CHECKCAST
            | INSTANCEOF
            | IFNULL
            | IFNONNULL => 3,
            MULTIANEWARRAY => 4,
            INVOKEINTERFACE | INVOKEDYNAMIC | GOTO_W | JSR_W => 5,
            TABLESWITCH | LOOKUPSWITCH | WIDE => 0,
            _ => 1,
        };
        op += 1;
    }
    t
};

/// Conditional and unconditional branches with a 16-bit offset (including `jsr`).
#[inline]
pub fn is_branch16(op: u8) -> bool {
    matches!(op, IFEQ..=JSR | IFNULL | IFNONNULL)
}

#[inline]
pub fn is_return(op: u8) -> bool {
    (IRETURN..=RETURN).contains(&op)
}

/// Instructions after which control never falls through to the next instruction.
#[inline]
pub fn is_unconditional(op: u8) -> bool {
    matches!(op, GOTO | GOTO_W | TABLESWITCH | LOOKUPSWITCH | ATHROW | RET) || is_return(op)
}

/// Instructions that may throw an exception (besides asynchronous errors), for the JP2 block rule: array
/// access, integer division, field access, invocations, allocation, casts, monitors, `athrow`, and `ldc` of
/// constants that need resolution is ignored (it throws only on linkage errors).
#[inline]
pub fn may_throw(op: u8) -> bool {
    matches!(
        op,
        IALOAD..=SALOAD
            | IASTORE..=SASTORE
            | IDIV
            | LDIV
            | IREM
            | LREM
            | GETSTATIC..=INVOKEDYNAMIC
            | NEW..=CHECKCAST
            | MONITORENTER
            | MONITOREXIT
            | MULTIANEWARRAY
    )
}

#[inline]
pub fn is_invoke(op: u8) -> bool {
    (INVOKEVIRTUAL..=INVOKEDYNAMIC).contains(&op)
}
