//! The per-method editor: insert snippets, add locals, raise max_stack, and write the relocated `Code`.
//!
//! Layout of the new code: `[prologue][snippets before insn 0][insn 0][snippets before insn 1][insn 1]...`.
//!
//! Two offset maps relocate everything that points into the code:
//! - the *target* map sends an old instruction offset to the start of the code inserted before it, so
//!   branches, switch targets, exception ranges and handlers, and stack map frames land on the inserted code and
//!   it runs whichever way the instruction is reached. Offset 0 maps to the end of the prologue, so the prologue
//!   runs once, lies outside every exception range, and a loop back to 0 does not repeat it.
//! - the *instruction* map sends an old offset to the moved instruction itself: branch sources, `Uninitialized`
//!   verification types (HotSpot checks they name a `new`), and type annotations on instructions.
//!
//! LineNumberTable and LocalVariable(Type)Table use the target map too, except that an entry starting at 0 still
//! starts at 0 (the prologue belongs to the first line, and parameters are live in it). Other attributes inside
//! `Code` (CharacterRangeTable and non-standard ones, which HotSpot ignores) are copied unchanged.
//!
//! A catch-all handler ([`CodeEditor::set_catch_all`]) goes after the original code: `[...][insn n-1][handler]`,
//! covered by one more exception-table entry, listed last, and described by one more stack map frame.
//!
//! Refusals ([`Refusal`]) leave the method unchanged: a branch that would need widening, code past 64 KB, code
//! crossing the byte budget (HotSpot's HugeMethodLimit, 8000: past it the JIT never compiles the method).

use super::annotations::relocate_type_annotations;
use super::bytes::{get_u16, get_u32, put_u16, put_u32, set_u32};
use super::class::{ClassFile, ACC_STATIC};
use super::code::{insn_len, switch_padding, Code};
use super::constant_pool::ConstantPool;
use super::constant_pool::CONSTANT_POOL_FULL;
use super::opcodes::*;
use super::snippet::Snippet;
use super::stackmap::{encode, initial_locals, Relocation, StackMap, VType};
use super::{Error, Result};

/// Why an edit was refused (the method is left as it was).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Refusal {
    /// A 16-bit branch offset would overflow: the branch would have to be widened.
    BranchOverflow,
    /// The code would exceed 65535 bytes.
    CodeTooLarge,
    /// The code would cross the byte budget (it was within it before).
    BudgetCrossed,
    /// max_locals or max_stack would exceed 65535.
    TooManySlots,
    /// The constant pool has no room for the entries the edit needs.
    ConstantPoolFull,
}

impl Refusal {
    pub fn name(self) -> &'static str {
        match self {
            Refusal::BranchOverflow => "branch-would-need-widening",
            Refusal::CodeTooLarge => "code-over-64k",
            Refusal::BudgetCrossed => "byte-budget-crossed",
            Refusal::TooManySlots => "too-many-locals-or-stack",
            Refusal::ConstantPoolFull => "constant-pool-full",
        }
    }
}

/// An edit failed: refused (a limit), or the method's code is malformed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EditError {
    Refused(Refusal),
    Malformed(Error),
}

impl From<Error> for EditError {
    fn from(e: Error) -> EditError {
        if e.what == CONSTANT_POOL_FULL {
            EditError::Refused(Refusal::ConstantPoolFull)
        } else {
            EditError::Malformed(e)
        }
    }
}

/// Size limits for an edited method.
#[derive(Clone, Copy, Debug)]
pub struct EditLimits {
    /// Code length an edit may not cross (an already larger method may still grow up to 64 KB).
    pub budget: u32,
}

/// HotSpot's HugeMethodLimit.
pub const DEFAULT_BUDGET: u32 = 8000;

impl Default for EditLimits {
    fn default() -> Self {
        EditLimits { budget: DEFAULT_BUDGET }
    }
}

/// What the editor needs to know about the method besides its code.
#[derive(Clone, Copy, Debug)]
pub struct MethodContext<'d> {
    pub this_class: u16,
    pub this_is_object: bool,
    pub is_static: bool,
    pub is_init: bool,
    pub descriptor: &'d [u8],
    /// The class file version requires a StackMapTable for branch targets and handlers (major 50 and later).
    pub stackmaps: bool,
    /// The `Code` attribute's name index, when the class already has a `Code` Utf8 (always true for a method
    /// with code).
    pub code_name_index: u16,
}

impl<'a> MethodContext<'a> {
    /// The context of method `index` of `class` (which must have code).
    pub fn of(class: &ClassFile<'a>, index: usize) -> Result<MethodContext<'a>> {
        let m = class.methods.get(index).ok_or(Error::new("no such method", index))?;
        let code = class.code_attribute(index).ok_or(Error::new("method has no code", index))?;
        Ok(MethodContext {
            this_class: class.this_class,
            this_is_object: class.constant_pool.original_utf8(match class.constant_pool.get(class.this_class)? {
                super::Constant::Class(n) => n,
                _ => return Err(Error::new("this_class is not a Class constant", 0)),
            })? == b"java/lang/Object",
            is_static: m.access_flags & ACC_STATIC != 0,
            is_init: class.member_name(m)? == b"<init>",
            descriptor: class.member_descriptor(m)?,
            stackmaps: class.major_version >= 50,
            code_name_index: code.name_index,
        })
    }
}

const NONE: u32 = u32::MAX;

/// Edits one method at a time; reuse it across methods to keep its buffers.
#[derive(Default)]
pub struct CodeEditor {
    max_stack: u16,
    max_locals: u16,
    code_len: u32,
    next_local: u32,
    extra_stack: u32,
    new_locals: Vec<VType>,
    /// (offset, start, end) into `inserted`, in insertion order.
    insertions: Vec<(u32, u32, u32)>,
    /// The same for code inserted after the instruction at `offset` ([`Self::insert_after`]).
    after: Vec<(u32, u32, u32)>,
    inserted: Vec<u8>,
    prologue: Vec<u8>,
    /// The catch-all handler's code (ending in `athrow`) and the Class entry of java/lang/Throwable.
    epilogue: Vec<u8>,
    catch_all: Option<u16>,
    /// The byte budget [`Self::crosses_budget`] compares with (kept across `begin`).
    budget: u32,
    // Scratch for `finish`.
    target_map: Vec<u32>,
    insn_map: Vec<u32>,
    stackmap: StackMap,
    initial: Vec<VType>,
    attr_buf: Vec<u8>,
}

impl CodeEditor {
    pub fn new() -> CodeEditor {
        CodeEditor { budget: DEFAULT_BUDGET, ..CodeEditor::default() }
    }

    /// Starts editing `code`, forgetting any previous edits.
    pub fn begin(&mut self, code: &Code<'_>) {
        self.max_stack = code.max_stack;
        self.max_locals = code.max_locals;
        self.code_len = code.code.len() as u32;
        self.next_local = code.max_locals as u32;
        self.extra_stack = 0;
        self.new_locals.clear();
        self.insertions.clear();
        self.after.clear();
        self.inserted.clear();
        self.prologue.clear();
        self.epilogue.clear();
        self.catch_all = None;
    }

    /// True when nothing was inserted or added since `begin`.
    pub fn is_unedited(&self) -> bool {
        self.insertions.is_empty()
            && self.after.is_empty()
            && self.prologue.is_empty()
            && self.new_locals.is_empty()
            && self.extra_stack == 0
            && self.catch_all.is_none()
    }

    /// Sets the budget that [`Self::crosses_budget`] checks (the one `finish` gets in its limits).
    pub fn set_budget(&mut self, budget: u32) {
        self.budget = budget;
    }

    /// True when the edits so far may take code within the budget past it, so that `finish` would refuse
    /// them: a transform may then try a smaller edit. `switches` is the number of switch instructions, whose
    /// padding can grow by up to 3 bytes each.
    pub fn crosses_budget(&self, switches: usize) -> bool {
        let len = self.code_len as usize + self.prologue.len() + self.inserted.len() + self.epilogue.len();
        self.code_len <= self.budget && len + 3 * switches > self.budget as usize
    }

    pub fn max_locals(&self) -> u16 {
        self.max_locals
    }

    /// Adds a local variable of type `t` at or above the old max_locals and returns its index. Every stack map
    /// frame gets `t` in that slot, so the prologue must store a value of that type there (or pass
    /// [`VType::Top`] for a local the prologue does not set).
    pub fn add_local(&mut self, t: VType) -> std::result::Result<u16, Refusal> {
        let index = self.next_local;
        if index + t.slots() > 65535 {
            return Err(Refusal::TooManySlots);
        }
        self.next_local += t.slots();
        self.new_locals.push(t);
        Ok(index as u16)
    }

    /// Raises max_stack by `n` slots (snippets raise it by their own depth already).
    pub fn raise_max_stack(&mut self, n: u16) {
        self.extra_stack = self.extra_stack.max(n as u32);
    }

    fn accept(&mut self, s: &Snippet) -> Result<()> {
        s.check()?;
        self.extra_stack = self.extra_stack.max(s.max_stack() as u32);
        Ok(())
    }

    /// Inserts `s` before the instruction at `offset` (checked when the method is written). Whatever reaches
    /// that instruction (fall-through, branch, switch, exception handler) runs `s` first. Several snippets at one
    /// offset run in the order they were inserted.
    pub fn insert_before(&mut self, offset: u32, s: &Snippet) -> Result<()> {
        self.accept(s)?;
        if offset >= self.code_len {
            return Err(Error::new("insertion offset past the end of the code", offset as usize));
        }
        let start = self.inserted.len() as u32;
        self.inserted.extend_from_slice(s.bytes());
        self.insertions.push((offset, start, self.inserted.len() as u32));
        Ok(())
    }

    /// Inserts `s` right after the instruction at `offset`, which must fall through to the next one: only
    /// that fall-through runs `s`; a branch to the next instruction (or a handler there) does not, as it
    /// lands after `s`. Several snippets after one instruction run in the order they were inserted.
    pub fn insert_after(&mut self, offset: u32, s: &Snippet) -> Result<()> {
        self.accept(s)?;
        if offset >= self.code_len {
            return Err(Error::new("insertion offset past the end of the code", offset as usize));
        }
        let start = self.inserted.len() as u32;
        self.inserted.extend_from_slice(s.bytes());
        self.after.push((offset, start, self.inserted.len() as u32));
        Ok(())
    }

    /// Appends `s` to the method prologue, which runs once per invocation, before everything else, outside
    /// every exception range.
    pub fn insert_prologue(&mut self, s: &Snippet) -> Result<()> {
        self.accept(s)?;
        self.prologue.extend_from_slice(s.bytes());
        Ok(())
    }

    /// Adds a handler for every exception the original code lets escape: `s` runs with the exception on the
    /// stack, then `athrow` rethrows it, unchanged (its stack trace too). The handler's range is the whole
    /// original code (not the prologue) and comes last in the exception table, so the method's own handlers
    /// catch first. It sees the added locals, typed as they were added (every stack map frame has them, so the
    /// prologue must have set them), and none of the method's own. `throwable` is the Class entry of
    /// java/lang/Throwable. Not for constructors, whose code before the super call has `this` uninitialized.
    pub fn set_catch_all(&mut self, s: &Snippet, throwable: u16) -> Result<()> {
        s.check()?;
        self.extra_stack = self.extra_stack.max(s.max_stack() as u32 + 1);
        self.epilogue.clear();
        self.epilogue.extend_from_slice(s.bytes());
        self.epilogue.push(ATHROW);
        self.catch_all = Some(throwable);
        Ok(())
    }

    fn target(&self, old: u32) -> Result<u32> {
        match self.target_map.get(old as usize) {
            Some(&v) if v != NONE => Ok(v),
            _ => Err(Error::new("offset is not an instruction boundary", old as usize)),
        }
    }

    fn insn(&self, old: u32) -> Result<u32> {
        match self.insn_map.get(old as usize) {
            Some(&v) if v != NONE => Ok(v),
            _ => Err(Error::new("offset is not an instruction boundary", old as usize)),
        }
    }

    /// Maps an offset that should be an instruction boundary but, in debug tables written by other compilers,
    /// may not be: a position inside an instruction keeps its distance from the instruction's start.
    fn loose(&self, old: u32) -> Result<u32> {
        let n = self.target_map.len() - 1;
        if old as usize > n {
            // Past the end (HotSpot checks debug tables only when it verifies the class): keep the distance.
            return Ok(self.target_map[n] + (old - n as u32));
        }
        if self.target_map[old as usize] != NONE {
            return Ok(self.target_map[old as usize]);
        }
        let mut b = old;
        while b > 0 && self.insn_map[b as usize] == NONE {
            b -= 1;
        }
        Ok(self.insn_map[b as usize] + (old - b))
    }

    /// A debug-table range `[start, start+len)`: an entry starting at 0 keeps starting at 0.
    fn debug_range(&self, start: u32, len: u32) -> Result<(u32, u32)> {
        let s = if start == 0 { 0 } else { self.loose(start)? };
        let e = self.loose(start + len)?;
        Ok((s, e.saturating_sub(s)))
    }

    /// Writes the edited method's complete `Code` attribute (header included) to `out` and returns true, or
    /// returns false and writes nothing when there was no edit and `force` is false. With `force` and no edit,
    /// the attribute is still decoded and re-encoded (the round-trip check). On error, `out` is left as it was.
    pub fn finish(
        &mut self,
        code: &Code<'_>,
        ctx: &MethodContext<'_>,
        cp: &mut ConstantPool<'_>,
        limits: &EditLimits,
        force: bool,
        out: &mut Vec<u8>,
    ) -> std::result::Result<bool, EditError> {
        if self.is_unedited() && !force {
            return Ok(false);
        }
        let mark = out.len();
        let r = self.write(code, ctx, cp, limits, out);
        if r.is_err() {
            out.truncate(mark);
        }
        r.map(|_| true)
    }

    fn layout(&mut self, bytes: &[u8]) -> Result<u32> {
        let n = bytes.len();
        self.target_map.clear();
        self.target_map.resize(n + 1, NONE);
        self.insn_map.clear();
        self.insn_map.resize(n + 1, NONE);
        if !self.insertions.is_sorted_by_key(|i| i.0) {
            self.insertions.sort_by_key(|i| i.0);
        }
        if !self.after.is_sorted_by_key(|i| i.0) {
            self.after.sort_by_key(|i| i.0);
        }
        let mut next = 0usize;
        let mut next_after = 0usize;
        let mut new_pos = self.prologue.len() as u64;
        let mut pos = 0usize;
        while pos < n {
            let len = insn_len(bytes, pos)?;
            self.target_map[pos] = new_pos as u32;
            while next < self.insertions.len() && self.insertions[next].0 as usize <= pos {
                let (at, s, e) = self.insertions[next];
                if at as usize != pos {
                    return Err(Error::new("insertion offset is not an instruction boundary", at as usize));
                }
                new_pos += (e - s) as u64;
                next += 1;
            }
            self.insn_map[pos] = new_pos.min(NONE as u64 - 1) as u32;
            let op = bytes[pos];
            new_pos += if op == TABLESWITCH || op == LOOKUPSWITCH {
                (len - switch_padding(pos) + switch_padding(new_pos as usize)) as u64
            } else {
                len as u64
            };
            while next_after < self.after.len() && self.after[next_after].0 as usize <= pos {
                let (at, s, e) = self.after[next_after];
                if at as usize != pos {
                    return Err(Error::new("insertion offset is not an instruction boundary", at as usize));
                }
                new_pos += (e - s) as u64;
                next_after += 1;
            }
            if new_pos > 1 << 20 {
                // Far past any limit: stop before the maps stop fitting.
                return Ok(new_pos as u32);
            }
            pos += len;
        }
        if next_after < self.after.len() {
            return Err(Error::new(
                "insertion offset is not an instruction boundary",
                self.after[next_after].0 as usize,
            ));
        }
        self.target_map[n] = new_pos as u32;
        self.insn_map[n] = new_pos as u32;
        Ok(new_pos as u32)
    }

    fn write(
        &mut self,
        code: &Code<'_>,
        ctx: &MethodContext<'_>,
        cp: &mut ConstantPool<'_>,
        limits: &EditLimits,
        out: &mut Vec<u8>,
    ) -> std::result::Result<(), EditError> {
        let bytes = code.code;
        let old_len = bytes.len() as u32;
        let code_end = self.layout(bytes)?;
        let new_len = code_end + self.epilogue.len() as u32;
        if new_len > 65535 {
            return Err(EditError::Refused(Refusal::CodeTooLarge));
        }
        if new_len > limits.budget && old_len <= limits.budget {
            return Err(EditError::Refused(Refusal::BudgetCrossed));
        }
        let max_stack = self.max_stack as u32 + self.extra_stack;
        if max_stack > 65535 || self.next_local > 65535 {
            return Err(EditError::Refused(Refusal::TooManySlots));
        }
        if code.narrow && (max_stack > 255 || self.next_local > 255) {
            return Err(EditError::Refused(Refusal::TooManySlots));
        }
        let attr_start = out.len();
        put_u16(out, ctx.code_name_index);
        put_u32(out, 0);
        if code.narrow {
            out.push(max_stack as u8);
            out.push(self.next_local as u8);
            put_u16(out, new_len as u16);
        } else {
            put_u16(out, max_stack as u16);
            put_u16(out, self.next_local as u16);
            put_u32(out, new_len);
        }
        let code_start = out.len();
        out.extend_from_slice(&self.prologue);
        let mut next = 0;
        let mut next_after = 0;
        let mut pos = 0usize;
        while pos < bytes.len() {
            let len = insn_len(bytes, pos)?;
            while next < self.insertions.len() && self.insertions[next].0 as usize == pos {
                let (_, s, e) = self.insertions[next];
                out.extend_from_slice(&self.inserted[s as usize..e as usize]);
                next += 1;
            }
            let here = self.insn_map[pos] as i64;
            debug_assert_eq!(here as usize, out.len() - code_start);
            let op = bytes[pos];
            if is_branch16(op) {
                let t = pos as i64 + get_u16(bytes, pos + 1)? as i16 as i64;
                let nt = self.target(u32::try_from(t).map_err(|_| Error::new("branch target out of range", pos))?)?;
                let d = nt as i64 - here;
                if d < i16::MIN as i64 || d > i16::MAX as i64 {
                    return Err(EditError::Refused(Refusal::BranchOverflow));
                }
                out.push(op);
                put_u16(out, d as i16 as u16);
            } else if op == GOTO_W || op == JSR_W {
                let t = pos as i64 + get_u32(bytes, pos + 1)? as i32 as i64;
                let nt = self.target(u32::try_from(t).map_err(|_| Error::new("branch target out of range", pos))?)?;
                out.push(op);
                put_u32(out, (nt as i64 - here) as i32 as u32);
            } else if op == TABLESWITCH || op == LOOKUPSWITCH {
                self.write_switch(bytes, pos, len, here, out)?;
            } else {
                out.extend_from_slice(&bytes[pos..pos + len]);
            }
            while next_after < self.after.len() && self.after[next_after].0 as usize == pos {
                let (_, s, e) = self.after[next_after];
                out.extend_from_slice(&self.inserted[s as usize..e as usize]);
                next_after += 1;
            }
            pos += len;
        }
        out.extend_from_slice(&self.epilogue);
        // Exception table.
        let entries = code.exception_table.len() / 8 + self.catch_all.is_some() as usize;
        if entries > 65535 {
            return Err(EditError::Refused(Refusal::CodeTooLarge));
        }
        put_u16(out, entries as u16);
        for e in code.exception_entries() {
            let s = self.target(e.start as u32)?;
            let en = self.target(e.end as u32)?;
            put_u16(out, s as u16);
            put_u16(out, en as u16);
            put_u16(out, self.target(e.handler as u32)? as u16);
            put_u16(out, e.catch_type);
        }
        if self.catch_all.is_some() {
            put_u16(out, self.prologue.len() as u16);
            put_u16(out, code_end as u16);
            put_u16(out, code_end as u16);
            put_u16(out, 0);
        }
        // Attributes of the Code attribute; a catch-all handler in a method without a StackMapTable brings one.
        let has_stackmap = code.attributes.iter().any(|a| cp.utf8(a.name_index).is_ok_and(|n| n == b"StackMapTable"));
        let new_stackmap = self.catch_all.is_some() && ctx.stackmaps && !has_stackmap;
        put_u16(out, (code.attributes.len() + new_stackmap as usize) as u16);
        if new_stackmap {
            let name = cp.add_utf8("StackMapTable")?;
            let mut body = std::mem::take(&mut self.attr_buf);
            body.clear();
            put_u16(&mut body, 0);
            if let Err(e) = self.append_catch_all_frame(-1, code_end, &mut body) {
                self.attr_buf = body;
                return Err(e.into());
            }
            put_u16(out, name);
            put_u32(out, body.len() as u32);
            out.extend_from_slice(&body);
            self.attr_buf = body;
        }
        for a in &code.attributes {
            let name = cp.utf8(a.name_index)?;
            let kind = match name {
                b"StackMapTable" => 1,
                b"LineNumberTable" => 2,
                b"LocalVariableTable" | b"LocalVariableTypeTable" => 3,
                b"RuntimeVisibleTypeAnnotations" | b"RuntimeInvisibleTypeAnnotations" => 4,
                _ => 0,
            };
            let mut body = std::mem::take(&mut self.attr_buf);
            body.clear();
            let r = match kind {
                1 => self.write_stackmap(a.info, ctx, cp, &mut body),
                2 => self.write_line_numbers(a.info, &mut body),
                3 => self.write_local_variables(a.info, &mut body),
                4 => relocate_type_annotations(a.info, |o| self.insn(o), |s, l| self.debug_range(s, l), &mut body),
                _ => {
                    body.extend_from_slice(a.info);
                    Ok(())
                }
            };
            if let Err(e) = r {
                self.attr_buf = body;
                return Err(e.into());
            }
            put_u16(out, a.name_index);
            put_u32(out, body.len() as u32);
            out.extend_from_slice(&body);
            self.attr_buf = body;
        }
        let total = out.len() - attr_start - 6;
        set_u32(out, attr_start + 2, total as u32);
        Ok(())
    }

    fn write_switch(&self, bytes: &[u8], pos: usize, len: usize, here: i64, out: &mut Vec<u8>) -> Result<()> {
        let old_pad = switch_padding(pos);
        let new_pad = switch_padding(here as usize);
        out.push(bytes[pos]);
        if old_pad == new_pad {
            // Keep the original padding bytes (not always zero in old class files).
            out.extend_from_slice(&bytes[pos + 1..pos + 1 + old_pad]);
        } else {
            out.extend(std::iter::repeat_n(0u8, new_pad));
        }
        let base = pos + 1 + old_pad;
        let reloc = |at: usize, out: &mut Vec<u8>| -> Result<()> {
            let t = pos as i64 + get_u32(bytes, at)? as i32 as i64;
            let nt = self.target(u32::try_from(t).map_err(|_| Error::new("switch target out of range", pos))?)?;
            put_u32(out, (nt as i64 - here) as i32 as u32);
            Ok(())
        };
        reloc(base, out)?;
        if bytes[pos] == TABLESWITCH {
            out.extend_from_slice(&bytes[base + 4..base + 12]);
            let mut at = base + 12;
            while at < pos + len {
                reloc(at, out)?;
                at += 4;
            }
        } else {
            out.extend_from_slice(&bytes[base + 4..base + 8]);
            let mut at = base + 8;
            while at < pos + len {
                out.extend_from_slice(&bytes[at..at + 4]);
                reloc(at + 4, out)?;
                at += 8;
            }
        }
        Ok(())
    }

    fn write_stackmap(
        &mut self,
        info: &[u8],
        ctx: &MethodContext<'_>,
        cp: &mut ConstantPool<'_>,
        out: &mut Vec<u8>,
    ) -> Result<()> {
        initial_locals(
            ctx.descriptor,
            ctx.is_static,
            ctx.is_init,
            ctx.this_class,
            ctx.this_is_object,
            &mut self.initial,
        )?;
        let mut map = std::mem::take(&mut self.stackmap);
        let r = map.decode(info, &self.initial).and_then(|_| {
            let extend = if self.new_locals.is_empty() { None } else { Some((self.max_locals, &self.new_locals[..])) };
            let this = &*self;
            let desc = ctx.descriptor;
            let mut reloc = Relocation {
                frame_offset: |o: u32| this.target(o),
                map_type: |t: VType| match t {
                    VType::Uninitialized(o) => Ok(VType::Uninitialized(this.insn(o as u32)? as u16)),
                    VType::Named(s, e) => {
                        let name = desc.get(s as usize..e as usize).ok_or(Error::new("bad descriptor", 0))?;
                        Ok(VType::Object(cp.add_class_bytes(name)?))
                    }
                    t => Ok(t),
                },
                extend,
            };
            encode(&map, &mut reloc, out)
        });
        let r = r.and_then(|_| {
            if self.catch_all.is_none() {
                return Ok(());
            }
            let last = match map.frames.last() {
                Some(f) => self.target(f.offset)? as i64,
                None => -1,
            };
            self.append_catch_all_frame(last, self.target_map[self.target_map.len() - 1], out)
        });
        self.stackmap = map;
        r
    }

    /// Appends the catch-all handler's frame at `at` to the StackMapTable body `out` (whose entry count it
    /// raises), after a frame at `prev` (-1: none): the method's own locals Top, the added ones as added,
    /// the exception on the stack.
    fn append_catch_all_frame(&self, prev: i64, at: u32, out: &mut Vec<u8>) -> Result<()> {
        let Some(throwable) = self.catch_all else { return Ok(()) };
        let too_many = || Error::new("too many frames or locals for the catch-all handler", at as usize);
        let n = get_u16(out, 0)?.checked_add(1).ok_or_else(too_many)?;
        out[..2].copy_from_slice(&n.to_be_bytes());
        let delta = u16::try_from(at as i64 - prev - 1).map_err(|_| too_many())?;
        let locals = u16::try_from(self.max_locals as usize + self.new_locals.len()).map_err(|_| too_many())?;
        out.push(255);
        put_u16(out, delta);
        put_u16(out, locals);
        out.extend(std::iter::repeat_n(0u8, self.max_locals as usize));
        for t in &self.new_locals {
            t.write(out)?;
        }
        put_u16(out, 1);
        VType::Object(throwable).write(out)
    }

    fn write_line_numbers(&self, info: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let n = get_u16(info, 0)? as usize;
        if info.len() != 2 + 4 * n {
            return Err(Error::new("bad LineNumberTable length", 0));
        }
        put_u16(out, n as u16);
        for e in info[2..].chunks_exact(4) {
            let pc = u16::from_be_bytes([e[0], e[1]]) as u32;
            let npc = if pc == 0 { 0 } else { self.loose(pc)? };
            put_u16(out, npc as u16);
            out.extend_from_slice(&e[2..4]);
        }
        Ok(())
    }

    fn write_local_variables(&self, info: &[u8], out: &mut Vec<u8>) -> Result<()> {
        let n = get_u16(info, 0)? as usize;
        if info.len() != 2 + 10 * n {
            return Err(Error::new("bad LocalVariableTable length", 0));
        }
        put_u16(out, n as u16);
        for e in info[2..].chunks_exact(10) {
            let start = u16::from_be_bytes([e[0], e[1]]) as u32;
            let len = u16::from_be_bytes([e[2], e[3]]) as u32;
            let (s, l) = self.debug_range(start, len)?;
            put_u16(out, s as u16);
            put_u16(out, l.min(65535) as u16);
            out.extend_from_slice(&e[4..10]);
        }
        Ok(())
    }
}
