//! The loop IR as pseudo-code, for `--emit loops` and snapshot tests.

use super::{GpuKernel, Mem, Stmt};
use crate::index::Index;
use crate::kernel::{Expr, ExprKind, Kernel};
use std::fmt;

/// Pretty-prints a lowered kernel as pseudo-code, for `--emit loops` and tests.
pub struct Pretty<'a> {
    pub kernel: &'a Kernel,
    pub gpu: &'a GpuKernel,
}

/// An expression of the loop IR as text: loads, LDS and register reads by
/// name, indices with the loops' names, operators infix (parenthesised).
fn expr_text(p: &Pretty<'_>, e: &Expr, sizes: &[String], vars: &[String]) -> String {
    let go = |x: &Expr| expr_text(p, x, sizes, vars);
    match &e.kind {
        ExprKind::Int(v) => v.to_string(),
        ExprKind::Float(v) => format!("{v:?}"),
        ExprKind::Param(id) => p.kernel.params[id.0 as usize].name.clone(),
        ExprKind::Index(i) => i.display(sizes, vars).to_string(),
        ExprKind::Load { tensor, indices } => {
            let ix: Vec<String> = indices
                .iter()
                .map(|i| i.display(sizes, vars).to_string())
                .collect();
            format!("{}[{}]", p.kernel.tensor(*tensor).name, ix.join(", "))
        }
        // Clamped subscripts are marked: they are not the value as written.
        ExprKind::Gather { tensor, indices } => {
            let ix: Vec<String> = indices
                .iter()
                .map(|i| match i.gather_subscript_is_clamped() {
                    true => format!("clamp({})", go(i)),
                    false => go(i),
                })
                .collect();
            format!("{}[{}]", p.kernel.tensor(*tensor).name, ix.join(", "))
        }
        ExprKind::Local { local, index } => format!(
            "{}[{}]",
            p.gpu.locals[*local as usize].name,
            index.display(sizes, vars)
        ),
        ExprKind::Shared { shared, index } => format!(
            "{}[{}]",
            p.gpu.shared[*shared as usize].name,
            index.display(sizes, vars)
        ),
        ExprKind::Reduced => "<reduced>".into(),
        ExprKind::Operand { right, slot } => format!("{}.{slot}", if *right { "b" } else { "a" }),
        ExprKind::Unary(crate::kernel::UnaryOp::Neg, a) => format!("-{}", go(a)),
        ExprKind::Unary(crate::kernel::UnaryOp::Not, a) => format!("!{}", go(a)),
        ExprKind::Cast(a) => format!("{}({})", e.dtype.name(), go(a)),
        ExprKind::Bitcast(a) => format!("bitcast({}, {})", go(a), e.dtype.name()),
        ExprKind::Select(c, a, b) => format!("select({}, {}, {})", go(c), go(a), go(b)),
        ExprKind::Call(m, args) => {
            let a: Vec<String> = args.iter().map(go).collect();
            format!("{}({})", m.name(), a.join(", "))
        }
        ExprKind::Binary(op, a, b) => {
            use crate::kernel::BinOp::*;
            let sym = match op {
                Min => return format!("min({}, {})", go(a), go(b)),
                Max => return format!("max({}, {})", go(a), go(b)),
                Add => "+",
                Sub => "-",
                Mul => "*",
                Div => "/",
                Rem => "%",
                Eq => "==",
                Ne => "!=",
                Lt => "<",
                Le => "<=",
                Gt => ">",
                Ge => ">=",
                And => "&&",
                Or => "||",
                BitAnd => "&",
                BitOr => "|",
                BitXor => "^",
                Shl => "<<",
                Shr => ">>",
            };
            format!("({} {sym} {})", go(a), go(b))
        }
    }
}

impl fmt::Display for Pretty<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sizes = self.kernel.size_names();
        let vars: Vec<String> = self.gpu.vars.iter().map(|v| v.name.clone()).collect();
        let g = &self.gpu;
        let args: Vec<&str> = g.args.iter().map(|a| a.name.as_str()).collect();
        writeln!(f, "kernel {}({})", g.name, args.join(", "))?;
        writeln!(
            f,
            "  block ({}, {}, {})  grid ({}, {}, {})",
            g.block[0],
            g.block[1],
            g.block[2],
            g.grid[0].display(&sizes, &vars),
            g.grid[1].display(&sizes, &vars),
            g.grid[2].display(&sizes, &vars)
        )?;
        writeln!(f, "  addressing {:?}", g.addressing)?;
        for (what, arrays) in [("lds", &g.shared), ("registers", &g.locals)] {
            if !arrays.is_empty() {
                let list: Vec<String> = arrays
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        // An LDS array sized at launch shows what it takes then.
                        let at_launch = match g.dynamic_len(i as u32) {
                            Some(n) if what == "lds" => {
                                format!(" (at launch: {})", n.display(&sizes, &vars))
                            }
                            _ => String::new(),
                        };
                        format!("{}: {}[{}]{at_launch}", a.name, a.dtype.name(), a.len)
                    })
                    .collect();
                writeln!(f, "  {what} {}", list.join(", "))?;
            }
        }
        Printer {
            f,
            p: self,
            sizes: &sizes,
            vars: &vars,
        }
        .stmts(&g.body, 1)
    }
}

/// Writes a kernel's statements, indented by depth.
struct Printer<'a, 'f, 'p> {
    f: &'a mut fmt::Formatter<'f>,
    p: &'a Pretty<'p>,
    sizes: &'a [String],
    vars: &'a [String],
}

impl Printer<'_, '_, '_> {
    fn index(&self, i: &Index) -> String {
        i.display(self.sizes, self.vars).to_string()
    }

    fn expr(&self, e: &Expr) -> String {
        expr_text(self.p, e, self.sizes, self.vars)
    }

    fn guards(&self, guards: &[crate::schedule::Guard]) -> String {
        let c: Vec<String> = guards
            .iter()
            .map(|g| format!("{} < {}", self.index(&g.value), self.index(&g.extent)))
            .collect();
        c.join(" && ")
    }

    /// Control flow here; each leaf through [`Printer::leaf`].
    fn stmts(&mut self, s: &[Stmt], ind: usize) -> fmt::Result {
        let pad = "  ".repeat(ind);
        for st in s {
            match st {
                Stmt::Barrier => writeln!(self.f, "{pad}barrier")?,
                Stmt::AsyncCommit => writeln!(self.f, "{pad}commit async copies")?,
                Stmt::AsyncWait { pending } => writeln!(
                    self.f,
                    "{pad}wait for async copies ({pending} groups may stay pending)"
                )?,
                Stmt::Unswitch { guards, fast, slow } => {
                    let c = self.guards(guards);
                    writeln!(self.f, "{pad}if {c} (every lane, vectorized):")?;
                    self.stmts(fast, ind + 1)?;
                    writeln!(self.f, "{pad}else:")?;
                    self.stmts(slow, ind + 1)?;
                }
                Stmt::Bind { var, axis } => {
                    writeln!(self.f, "{pad}{} = {axis}", self.vars[var.0 as usize])?
                }
                Stmt::Loop {
                    var,
                    extent,
                    unroll,
                    body,
                } => {
                    let (v, e) = (&self.vars[var.0 as usize], self.index(extent));
                    let u = if *unroll { " (unrolled)" } else { "" };
                    writeln!(self.f, "{pad}for {v} in 0..{e}{u}:")?;
                    self.stmts(body, ind + 1)?;
                }
                Stmt::If { guards, body } => {
                    let c = self.guards(guards);
                    writeln!(self.f, "{pad}if {c}:")?;
                    self.stmts(body, ind + 1)?;
                }
                Stmt::MatrixLoad {
                    shared,
                    row,
                    count,
                    trans,
                    stores,
                } => {
                    writeln!(
                        self.f,
                        "{pad}ldmatrix x{count}{} from {}, this lane's row at [{}]:",
                        if *trans { " (transposed)" } else { "" },
                        self.p.gpu.shared[*shared as usize].name,
                        self.index(row)
                    )?;
                    self.stmts(stores, ind + 1)?;
                }
                Stmt::MatrixDesc {
                    local,
                    index,
                    shared,
                    start,
                    mn_block,
                    row_bytes,
                    stores,
                } => {
                    let layout = match mn_block {
                        None => format!("{row_bytes}-byte swizzle"),
                        Some(b) => {
                            format!("{row_bytes}-byte swizzle, transposed, blocks {b} bytes apart")
                        }
                    };
                    writeln!(
                        self.f,
                        "{pad}{}[{}] = descriptor of {} at [{}] ({layout}):",
                        self.p.gpu.locals[*local as usize].name,
                        self.index(index),
                        self.p.gpu.shared[*shared as usize].name,
                        self.index(start)
                    )?;
                    self.stmts(stores, ind + 1)?;
                }
                Stmt::MatrixAsync(op) => match op {
                    crate::loops::MatrixAsync::Fence => {
                        writeln!(self.f, "{pad}fence before matrix instructions")?
                    }
                    crate::loops::MatrixAsync::Commit => {
                        writeln!(self.f, "{pad}commit matrix instructions")?
                    }
                    crate::loops::MatrixAsync::Wait(n) => writeln!(
                        self.f,
                        "{pad}wait for matrix instructions ({n} groups may stay pending)"
                    )?,
                },
                Stmt::TensorCopy {
                    tensor,
                    map,
                    coords,
                    boxes,
                    shared,
                    start,
                    bar,
                    fills,
                } => {
                    let boxed = &self.p.gpu.tensor_maps[*map as usize].boxed;
                    let c: Vec<String> = coords.iter().map(|i| self.index(i)).collect();
                    let b: Vec<String> = boxed.iter().map(|n| n.to_string()).collect();
                    writeln!(
                        self.f,
                        "{pad}{}[{}..] = TMA {boxes} box(es) [{}] of {} from [{}], completing {}[{}]:",
                        self.p.gpu.shared[*shared as usize].name,
                        self.index(start),
                        b.join(" x "),
                        self.p.kernel.tensor(*tensor).name,
                        c.join(", "),
                        self.p.gpu.shared[bar.0 as usize].name,
                        self.index(&bar.1)
                    )?;
                    self.stmts(fills, ind + 1)?;
                }
                Stmt::SharedStore { .. }
                | Stmt::Fill { .. }
                | Stmt::LocalStore { .. }
                | Stmt::Mbarrier(_)
                | Stmt::Matrix { .. }
                | Stmt::Shuffle { .. }
                | Stmt::Store { .. }
                | Stmt::Scatter { .. } => {
                    let line = self.leaf(st);
                    writeln!(self.f, "{pad}{line}")?;
                }
            }
        }
        Ok(())
    }

    /// The line of a [`Stmt::Fill`]: its notes (LDS, async, zero past the
    /// tensor) in one pair of parentheses.
    fn fill(
        &self,
        mem: Mem,
        array: u32,
        index: &Index,
        value: &Expr,
        width: u32,
        [asynchronous, zero]: [bool; 2],
    ) -> String {
        let p = self.p;
        let name = match mem {
            Mem::Shared => &p.gpu.shared[array as usize].name,
            Mem::Local => &p.gpu.locals[array as usize].name,
        };
        let notes: Vec<&str> = [
            (mem == Mem::Shared, "LDS"),
            (mem == Mem::Shared && asynchronous, "async"),
            (zero, "zero past the tensor"),
        ]
        .into_iter()
        .filter_map(|(on, n)| on.then_some(n))
        .collect();
        let tag = if notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", notes.join(", "))
        };
        format!(
            "{name}[{}..+{width}] = {}..+{width}{tag}",
            self.index(index),
            self.expr(value)
        )
    }

    /// The line of a statement without a body.
    fn leaf(&self, st: &Stmt) -> String {
        let p = self.p;
        match st {
            Stmt::SharedStore {
                shared,
                index,
                value,
            } => format!(
                "{}[{}] = {} (LDS)",
                p.gpu.shared[*shared as usize].name,
                self.index(index),
                self.expr(value)
            ),
            Stmt::Fill {
                mem,
                array,
                index,
                value,
                width,
                asynchronous,
                zero,
            } => self.fill(*mem, *array, index, value, *width, [*asynchronous, *zero]),
            Stmt::LocalStore {
                local,
                index,
                value,
            } => format!(
                "{}[{}] = {}",
                p.gpu.locals[*local as usize].name,
                self.index(index),
                self.expr(value)
            ),
            Stmt::Shuffle {
                local,
                index,
                value,
                mask,
                ..
            } => format!(
                "{}[{}] = lane_xor({}, {mask})",
                p.gpu.locals[*local as usize].name,
                self.index(index),
                self.expr(value)
            ),
            Stmt::Matrix {
                instr, a, b, acc, ..
            } => {
                let arr = |(id, base): &(u32, Index), n: u32| {
                    format!(
                        "{}[{}..+{n}]",
                        p.gpu.locals[*id as usize].name,
                        self.index(base)
                    )
                };
                let regs = if instr.warpgroup() && !instr.a_in_shared() {
                    ", A in registers"
                } else if instr.transposed {
                    ", transposed: A and B swapped"
                } else {
                    ""
                };
                format!(
                    "{} += {} x {} ({}, {}x{}x{}, wave{}{regs})",
                    arr(acc, instr.acc_per_lane()),
                    arr(a, instr.a_per_lane()),
                    arr(b, instr.b_per_lane()),
                    instr.name,
                    instr.m,
                    instr.n,
                    instr.k,
                    instr.wave
                )
            }
            Stmt::Mbarrier(m) => {
                let b = m.bar();
                let bar = format!("{}[{}]", p.gpu.shared[b.0 as usize].name, self.index(&b.1));
                match m {
                    crate::loops::Mbarrier::Init { .. } => format!("mbarrier {bar}: init"),
                    crate::loops::Mbarrier::Inval { .. } => format!("mbarrier {bar}: invalidate"),
                    crate::loops::Mbarrier::Expect { bytes, .. } => {
                        format!("mbarrier {bar}: arrive expecting {bytes} bytes")
                    }
                    crate::loops::Mbarrier::Wait { parity, .. } => {
                        format!(
                            "mbarrier {bar}: wait for phase parity {}",
                            self.index(parity)
                        )
                    }
                }
            }
            Stmt::Store {
                tensor,
                indices,
                value,
            } => {
                let ix: Vec<String> = indices.iter().map(|i| self.index(i)).collect();
                format!(
                    "{}[{}] = {}",
                    p.kernel.tensor(*tensor).name,
                    ix.join(", "),
                    self.expr(value)
                )
            }
            Stmt::Scatter {
                tensor,
                indices,
                op,
                value,
                shared,
            } => {
                let ix: Vec<String> = indices.iter().map(|i| self.expr(i)).collect();
                let op = match op {
                    crate::kernel::ReduceOp::Sum => "+=",
                    crate::kernel::ReduceOp::Prod => "*=",
                    crate::kernel::ReduceOp::Max => "max=",
                    crate::kernel::ReduceOp::Min => "min=",
                    crate::kernel::ReduceOp::Or => "|=",
                    crate::kernel::ReduceOp::And => "&=",
                };
                let (name, mem) = match shared {
                    Some(a) => (p.gpu.shared[*a as usize].name.as_str(), " in LDS"),
                    None => (p.kernel.tensor(*tensor).name.as_str(), ""),
                };
                format!(
                    "{name}[{}] {op} {} (atomic{mem}; dropped outside the tensor)",
                    ix.join(", "),
                    self.expr(value)
                )
            }
            Stmt::Barrier
            | Stmt::AsyncCommit
            | Stmt::AsyncWait { .. }
            | Stmt::Unswitch { .. }
            | Stmt::Bind { .. }
            | Stmt::Loop { .. }
            | Stmt::If { .. }
            | Stmt::MatrixDesc { .. }
            | Stmt::MatrixAsync(_)
            | Stmt::TensorCopy { .. }
            | Stmt::MatrixLoad { .. } => unreachable!("printed by Printer::stmts"),
        }
    }
}
