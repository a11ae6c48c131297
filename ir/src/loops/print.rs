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
        fn go(
            f: &mut fmt::Formatter<'_>,
            p: &Pretty<'_>,
            s: &[Stmt],
            ind: usize,
            sizes: &[String],
            vars: &[String],
        ) -> fmt::Result {
            let pad = "  ".repeat(ind);
            for st in s {
                match st {
                    Stmt::SharedStore {
                        shared,
                        index,
                        value,
                    } => {
                        writeln!(
                            f,
                            "{pad}{}[{}] = {} (LDS)",
                            p.gpu.shared[*shared as usize].name,
                            index.display(sizes, vars),
                            expr_text(p, value, sizes, vars)
                        )?;
                    }
                    Stmt::Fill {
                        mem,
                        array,
                        index,
                        value,
                        width,
                        asynchronous,
                    } => {
                        let (name, tag) = match (mem, asynchronous) {
                            (Mem::Shared, true) => {
                                (&p.gpu.shared[*array as usize].name, " (LDS, async)")
                            }
                            (Mem::Shared, false) => (&p.gpu.shared[*array as usize].name, " (LDS)"),
                            (Mem::Local, _) => (&p.gpu.locals[*array as usize].name, ""),
                        };
                        writeln!(
                            f,
                            "{pad}{name}[{}..+{width}] = {}..+{width}{tag}",
                            index.display(sizes, vars),
                            expr_text(p, value, sizes, vars)
                        )?;
                    }
                    Stmt::Barrier => writeln!(f, "{pad}barrier")?,
                    Stmt::AsyncCommit => writeln!(f, "{pad}commit async copies")?,
                    Stmt::AsyncWait { pending } => writeln!(
                        f,
                        "{pad}wait for async copies ({pending} groups may stay pending)"
                    )?,
                    Stmt::Unswitch { guards, fast, slow } => {
                        let c: Vec<String> = guards
                            .iter()
                            .map(|g| {
                                format!(
                                    "{} < {}",
                                    g.value.display(sizes, vars),
                                    g.extent.display(sizes, vars)
                                )
                            })
                            .collect();
                        writeln!(f, "{pad}if {} (every lane, vectorized):", c.join(" && "))?;
                        go(f, p, fast, ind + 1, sizes, vars)?;
                        writeln!(f, "{pad}else:")?;
                        go(f, p, slow, ind + 1, sizes, vars)?;
                    }
                    Stmt::Bind { var, axis } => {
                        writeln!(f, "{pad}{} = {axis}", vars[var.0 as usize])?
                    }
                    Stmt::Loop {
                        var,
                        extent,
                        unroll,
                        body,
                    } => {
                        writeln!(
                            f,
                            "{pad}for {} in 0..{}{}:",
                            vars[var.0 as usize],
                            extent.display(sizes, vars),
                            if *unroll { " (unrolled)" } else { "" }
                        )?;
                        go(f, p, body, ind + 1, sizes, vars)?;
                    }
                    Stmt::If { guards, body } => {
                        let c: Vec<String> = guards
                            .iter()
                            .map(|g| {
                                format!(
                                    "{} < {}",
                                    g.value.display(sizes, vars),
                                    g.extent.display(sizes, vars)
                                )
                            })
                            .collect();
                        writeln!(f, "{pad}if {}:", c.join(" && "))?;
                        go(f, p, body, ind + 1, sizes, vars)?;
                    }
                    Stmt::LocalStore {
                        local,
                        index,
                        value,
                    } => {
                        writeln!(
                            f,
                            "{pad}{}[{}] = {}",
                            p.gpu.locals[*local as usize].name,
                            index.display(sizes, vars),
                            expr_text(p, value, sizes, vars)
                        )?;
                    }
                    Stmt::MatrixLoad {
                        shared,
                        row,
                        count,
                        trans,
                        stores,
                    } => {
                        writeln!(
                            f,
                            "{pad}ldmatrix x{count}{} from {}, this lane's row at [{}]:",
                            if *trans { " (transposed)" } else { "" },
                            p.gpu.shared[*shared as usize].name,
                            row.display(sizes, vars)
                        )?;
                        go(f, p, stores, ind + 1, sizes, vars)?;
                    }
                    Stmt::Matrix {
                        instr, a, b, acc, ..
                    } => {
                        let arr = |(id, base): &(u32, Index), n: u32| {
                            format!(
                                "{}[{}..+{n}]",
                                p.gpu.locals[*id as usize].name,
                                base.display(sizes, vars)
                            )
                        };
                        writeln!(
                            f,
                            "{pad}{} += {} x {} ({}, {}x{}x{}, wave{})",
                            arr(acc, instr.acc_per_lane()),
                            arr(a, instr.a_per_lane()),
                            arr(b, instr.b_per_lane()),
                            instr.name,
                            instr.m,
                            instr.n,
                            instr.k,
                            instr.wave
                        )?;
                    }
                    Stmt::Store {
                        tensor,
                        indices,
                        value,
                    } => {
                        let ix: Vec<String> = indices
                            .iter()
                            .map(|i| i.display(sizes, vars).to_string())
                            .collect();
                        writeln!(
                            f,
                            "{pad}{}[{}] = {}",
                            p.kernel.tensor(*tensor).name,
                            ix.join(", "),
                            expr_text(p, value, sizes, vars)
                        )?;
                    }
                    Stmt::Scatter {
                        tensor,
                        indices,
                        op,
                        value,
                        shared,
                    } => {
                        let ix: Vec<String> = indices
                            .iter()
                            .map(|i| expr_text(p, i, sizes, vars))
                            .collect();
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
                        writeln!(
                            f,
                            "{pad}{name}[{}] {op} {} (atomic{mem}; dropped outside the tensor)",
                            ix.join(", "),
                            expr_text(p, value, sizes, vars)
                        )?;
                    }
                }
            }
            Ok(())
        }
        writeln!(f, "  addressing {:?}", g.addressing)?;
        for (what, arrays) in [("lds", &g.shared), ("registers", &g.locals)] {
            if !arrays.is_empty() {
                let list: Vec<String> = arrays
                    .iter()
                    .map(|a| format!("{}: {}[{}]", a.name, a.dtype.name(), a.len))
                    .collect();
                writeln!(f, "  {what} {}", list.join(", "))?;
            }
        }
        go(f, self, &g.body, 1, &sizes, &vars)
    }
}
