//! Register bytes packed into LDS words: a transposing `cache_read` of a
//! 1-byte type (an fp8 or int8 GEMM's B tile, stored k-major) writes each
//! LDS word from four bytes that sit in four different registers (one per
//! row loaded). Stored byte by byte, LLVM's AMDGPU lowering assembles each
//! word with shifts, masks and 16-bit ors: about nine VALU instructions a
//! word, 70 of the 101 VALU in the gfx950 fp8 GEMM's loop. A byte permute
//! (`v_perm_b32`) takes any four bytes of two words, so a 4x4 byte
//! transpose is two of them a word: pairs of rows interleaved, then the
//! interleaved pairs combined.

use super::*;
use rocmc_ir::kernel::ExprKind;
use rocmc_ir::loops::{Local, Stmt};

/// One byte a packed word takes: byte `c` of register array `local`.
type Source = (u32, i64);

/// How many statements at the start of `stmts` (a multiple of 4; 0 for
/// none) store register bytes into consecutive LDS bytes four at a time:
/// each group of four are `shared[x + l] = locals[r_l][c_l]` for l = 0..4,
/// with one array `shared`, `x` a known multiple of 4 (the word is
/// aligned), 1-byte values and constant register indices whose words lie
/// inside their arrays. The values read registers only, so the group's
/// stores commute and one word store is each group's meaning.
pub(super) fn byte_pack_run(locals: &[Local], stmts: &[Stmt], divisors: &[u64]) -> usize {
    let mut n = 0;
    while let Some(group) = stmts.get(n..n + 4) {
        if pack_group(locals, group, divisors).is_none() {
            break;
        }
        n += 4;
    }
    n
}

/// The LDS array, the first store's index and the four bytes of one group
/// (see [`byte_pack_run`]).
fn pack_group<'s>(
    locals: &[Local],
    group: &'s [Stmt],
    divisors: &[u64],
) -> Option<(u32, &'s Index, [Source; 4])> {
    let mut first = None;
    let mut sources = [(0, 0); 4];
    for (l, s) in group.iter().enumerate() {
        let Stmt::SharedStore {
            shared,
            index,
            value,
        } = s
        else {
            return None;
        };
        let ExprKind::Local {
            local,
            index: Index::Const(c),
        } = &value.kind
        else {
            return None;
        };
        let len = locals.get(*local as usize)?.len as i64;
        if value.dtype.size() != 1 || value.dtype == DType::Bool || (c / 4) * 4 + 4 > len {
            return None;
        }
        let (terms, c0) = index.affine();
        match first {
            None => {
                if index.known_divisor_in(divisors) % 4 != 0 {
                    return None;
                }
                first = Some((*shared, index, terms, c0));
            }
            Some((sh, _, ref t, k)) => {
                if sh != *shared || *t != terms || c0 != k + l as i64 {
                    return None;
                }
            }
        }
        sources[l] = (*local, *c);
    }
    let (shared, index, ..) = first?;
    Some((shared, index, sources))
}

impl<'a, 'ctx> FnCx<'a, 'ctx> {
    /// The run [`byte_pack_run`] found: one word store per group of four,
    /// each word made by the target's byte permute.
    pub(super) fn byte_pack(&mut self, run: &[Stmt]) -> R<()> {
        let mut words: HashMap<(u32, i64), IntValue<'ctx>> = HashMap::new();
        let mut pairs: HashMap<(Source, Source), IntValue<'ctx>> = HashMap::new();
        for group in run.chunks(4) {
            let (shared, index, src) = pack_group(&self.g.locals, group, &self.divisors)
                .ok_or_else(|| {
                    crate::CodegenError::Llvm(
                        "a byte-pack run that does not pack (a rocmc bug)".into(),
                    )
                })?;
            // Bytes 0, 1 from rows 0, 1 and bytes 2, 3 from rows 2, 3: each
            // pair from the interleave of its two words' halves (shared by
            // the group of the neighbouring column), then one permute.
            let (lo, lo_at) = self.interleaved(&mut words, &mut pairs, src[0], src[1])?;
            let (hi, hi_at) = self.interleaved(&mut words, &mut pairs, src[2], src[3])?;
            let word = self.be.byte_select(
                &self.ctx(),
                hi,
                lo,
                [lo_at, lo_at + 1, 4 + hi_at, 5 + hi_at],
            )?;
            let p = self.shared_ptr(shared, index)?;
            let st = self.b.build_store(p, word).map_err(llvm_err)?;
            st.set_alignment(4).map_err(llvm_err)?;
        }
        Ok(())
    }

    /// A word holding byte `a` then byte `b` at some even position, and
    /// that position: where both are the same byte of their words, the
    /// interleave of those words' halves, `[a0 b0 a1 b1]` or `[a2 b2 a3
    /// b3]`, which the neighbouring column's group reuses; else the two
    /// bytes at 0 and 1.
    fn interleaved(
        &mut self,
        words: &mut HashMap<(u32, i64), IntValue<'ctx>>,
        pairs: &mut HashMap<(Source, Source), IntValue<'ctx>>,
        a: Source,
        b: Source,
    ) -> R<(IntValue<'ctx>, u8)> {
        let (wa, wb) = (self.word(words, a)?, self.word(words, b)?);
        let (ba, bb) = ((a.1 % 4) as u8, (b.1 % 4) as u8);
        if ba != bb {
            let v = self
                .be
                .byte_select(&self.ctx(), wb, wa, [ba, 4 + bb, ba, 4 + bb])?;
            return Ok((v, 0));
        }
        let half = ba / 2;
        // The two words and which half of them: byte pairs 0-1 or 2-3.
        let key = (
            (a.0, a.1 / 4 * 2 + half as i64),
            (b.0, b.1 / 4 * 2 + half as i64),
        );
        let v = match pairs.get(&key) {
            Some(v) => *v,
            None => {
                let h = 2 * half;
                let v = self
                    .be
                    .byte_select(&self.ctx(), wb, wa, [h, 4 + h, h + 1, 5 + h])?;
                pairs.insert(key, v);
                v
            }
        };
        Ok((v, 2 * (ba % 2)))
    }

    /// The 32-bit word of register array `s.0` holding its byte `s.1`.
    fn word(
        &mut self,
        words: &mut HashMap<(u32, i64), IntValue<'ctx>>,
        s: Source,
    ) -> R<IntValue<'ctx>> {
        let key = (s.0, s.1 / 4);
        if let Some(w) = words.get(&key) {
            return Ok(*w);
        }
        let p = self.local_ptr(s.0, &Index::c(key.1 * 4))?;
        let i32t = self.cx.i32_type();
        let w = self
            .b
            .build_load(i32t, p, "")
            .map_err(llvm_err)?
            .into_int_value();
        // Register arrays of bytes are aligned to their element only.
        if let Some(inst) = w.as_instruction() {
            inst.set_alignment(1).map_err(llvm_err)?;
        }
        words.insert(key, w);
        Ok(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rocmc_ir::index::VarId;
    use rocmc_ir::Expr;

    fn kernel(len: u32) -> Vec<Local> {
        vec![Local {
            name: "r".into(),
            dtype: DType::U8,
            len,
            span: Default::default(),
        }]
    }

    fn store(x: Index, c: i64) -> Stmt {
        Stmt::SharedStore {
            shared: 0,
            index: x,
            value: Expr::local(0, Index::c(c), DType::U8),
        }
    }

    #[test]
    fn a_transposed_tile_packs_in_words() {
        let g = kernel(32);
        let v = Index::Var(VarId(0)) * Index::c(8);
        // Column n of rows 0..4: register bytes n, 8 + n, 16 + n, 24 + n.
        let run: Vec<Stmt> = (0..8)
            .flat_map(|n| {
                let v = v.clone();
                (0..4).map(move |k| store(v.clone() + Index::c(n * 128 + k), n + 8 * k))
            })
            .collect();
        assert_eq!(byte_pack_run(&g, &run, &[]), 32);
        // Columns 4..8 read bytes 28.. (word 7), which 30 bytes do not hold whole.
        assert_eq!(byte_pack_run(&kernel(30), &run, &[]), 16);
    }

    /// `v_perm_b32`'s selector as the AMD backend encodes it means what
    /// the target-neutral shifts mean: LLVM folds both on constants.
    #[test]
    fn amd_byte_permute_selects_as_the_shifts_do() {
        use crate::emit::Emit;
        use inkwell::context::Context;
        use inkwell::passes::PassBuilderOptions;
        let t = rocmc_target::Target::parse("gfx950", None, 5).unwrap();
        let amd = crate::backend::lookup(&t);
        let host = rocmc_target::Target::parse("x86-64", None, 5).unwrap();
        let shifts = crate::backend::lookup(&host);
        let cx = Context::create();
        let m = cx.create_module("perm");
        let b = cx.create_builder();
        let i32t = cx.i32_type();
        let (hi, lo) = (0x8786_8584_u64, 0x0302_0100_u64);
        let sels: [[u8; 4]; 5] = [
            [0, 4, 1, 5],
            [2, 6, 3, 7],
            [0, 1, 4, 5],
            [2, 3, 6, 7],
            [7, 0, 5, 2],
        ];
        for (n, sel) in sels.iter().enumerate() {
            for (who, be) in [("amd", &amd), ("shifts", &shifts)] {
                let f = m.add_function(&format!("{who}{n}"), i32t.fn_type(&[], false), None);
                b.position_at_end(cx.append_basic_block(f, ""));
                let e = Emit {
                    cx: &cx,
                    m: &m,
                    b: &b,
                };
                let (h, l) = (i32t.const_int(hi, false), i32t.const_int(lo, false));
                let v = be.byte_select(&e, h, l, *sel).unwrap();
                b.build_return(Some(&v)).unwrap();
            }
        }
        let tm = amd.target_machine().unwrap();
        m.run_passes("instcombine", &tm, PassBuilderOptions::create())
            .unwrap();
        let folded = |name: &str| {
            let f = m.get_function(name).unwrap();
            let ret = f.get_first_basic_block().unwrap().get_terminator().unwrap();
            let v = ret.get_operand(0).unwrap().unwrap_value().into_int_value();
            v.get_zero_extended_constant().unwrap()
        };
        let bytes = (lo | hi << 32).to_le_bytes();
        for (n, sel) in sels.iter().enumerate() {
            let want = u32::from_le_bytes(sel.map(|s| bytes[s as usize])) as u64;
            assert_eq!(folded(&format!("shifts{n}")), want, "shifts, {sel:?}");
            assert_eq!(folded(&format!("amd{n}")), want, "v_perm_b32, {sel:?}");
        }
    }

    #[test]
    fn misaligned_or_broken_runs_do_not_pack() {
        let g = kernel(32);
        let v = Index::Var(VarId(0)) * Index::c(8);
        let odd: Vec<Stmt> = (0..4)
            .map(|k| store(v.clone() + Index::c(1 + k), k))
            .collect();
        assert_eq!(byte_pack_run(&g, &odd, &[]), 0);
        let gap: Vec<Stmt> = [0, 1, 3, 4]
            .iter()
            .map(|&k| store(v.clone() + Index::c(k), k))
            .collect();
        assert_eq!(byte_pack_run(&g, &gap, &[]), 0);
        let unknown: Vec<Stmt> = (0..4)
            .map(|k| store(Index::Var(VarId(0)) + Index::c(k), k))
            .collect();
        assert_eq!(byte_pack_run(&g, &unknown, &[]), 0);
    }
}
