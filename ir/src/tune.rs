//! Tunable schedule parameters: the `[tune]` section of a kernel file.
//!
//! ```toml
//! [tune]
//! constraints = ["TILE % T == 0", "(TILE / T) * (TILE / T) <= 1024"]
//! [tune.params]
//! TILE = { values = [32, 64, 128], default = 128 }
//! T = { pow2 = [2, 16], default = 8 }
//! KS = { range = [8, 32], step = 8, default = 16 }
//! ```
//!
//! Schedule steps name a parameter where they take an integer
//! (`tile(i, j, TILE, TILE)`, also in `+ - * / %` of parameters and
//! integers). A kernel is always parsed for one configuration: the defaults,
//! or values given by the tuner or the tuning database, each checked
//! against its candidates and the constraints.

use crate::diag::{Diagnostic, Span};
use crate::syntax::{Ast, AstKind, BinaryOp, StepStmt, UnaryOp};

/// One tunable parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneParam {
    pub name: String,
    /// Candidates, ascending, without repeats.
    pub values: Vec<i64>,
    /// What the kernel builds with when nothing is tuned.
    pub default: i64,
    pub span: Span,
}

/// A condition every configuration must meet (`TILE % T == 0`).
#[derive(Clone, Debug, PartialEq)]
pub struct Constraint {
    pub text: String,
    pub ast: Ast,
    pub span: Span,
}

/// The tunable parameters of a kernel and the constraints between them.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct TuneSpace {
    pub params: Vec<TuneParam>,
    pub constraints: Vec<Constraint>,
}

/// A kernel's tune space and the configuration it was parsed with.
#[derive(Clone, Debug, PartialEq)]
pub struct Tuning {
    pub space: TuneSpace,
    pub config: Config,
}

/// Values for every parameter, in declaration order.
pub type Config = Vec<(String, i64)>;

/// A configuration as people read it: `TILE=64 T=4`.
pub fn describe(c: &Config) -> String {
    c.iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Parses `TILE=64,T=4` (or space-separated).
pub fn parse_assignments(s: &str) -> Result<Vec<(String, i64)>, String> {
    s.split([',', ' '])
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (n, v) = p
                .split_once('=')
                .ok_or_else(|| format!("`{p}` is not NAME=VALUE"))?;
            let v: i64 = v
                .trim()
                .parse()
                .map_err(|_| format!("`{p}`: `{v}` is not an integer"))?;
            Ok((n.trim().to_string(), v))
        })
        .collect()
}

impl TuneSpace {
    /// The configuration the kernel builds with when nothing is tuned.
    pub fn default_config(&self) -> Config {
        self.params
            .iter()
            .map(|p| (p.name.clone(), p.default))
            .collect()
    }

    /// How many configurations the candidates make, before constraints.
    pub fn size(&self) -> u128 {
        self.params.iter().map(|p| p.values.len() as u128).product()
    }

    /// The `i`-th configuration of the candidates' product (mixed radix,
    /// the last parameter varying fastest), or `None` past the end.
    pub fn nth(&self, mut i: u128) -> Option<Config> {
        if i >= self.size() {
            return None;
        }
        let mut out = vec![(String::new(), 0); self.params.len()];
        for (slot, p) in out.iter_mut().zip(&self.params).rev() {
            let n = p.values.len() as u128;
            *slot = (p.name.clone(), p.values[(i % n) as usize]);
            i /= n;
        }
        Some(out)
    }

    /// The first constraint `c` breaks, with the values it saw.
    pub fn broken(&self, c: &Config) -> Option<String> {
        for k in &self.constraints {
            match eval(&k.ast, c) {
                Ok(v) if v != 0 => {}
                Ok(_) => return Some(format!("`{}` is false for {}", k.text, describe(c))),
                Err((_, m)) => return Some(format!("`{}`: {m} for {}", k.text, describe(c))),
            }
        }
        None
    }

    /// `defaults` overridden by `given`: every name must be a parameter and
    /// every value one of its candidates; the result must meet the
    /// constraints. Errors say which value or constraint, and what exists.
    pub fn resolve(&self, given: &[(String, i64)]) -> Result<Config, String> {
        let mut c = self.default_config();
        for (n, v) in given {
            let Some(i) = self.params.iter().position(|p| &p.name == n) else {
                return Err(if self.params.is_empty() {
                    format!("no tune parameter `{n}`: the kernel has no [tune] section")
                } else {
                    format!(
                        "no tune parameter `{n}`; the kernel has: {}",
                        self.params
                            .iter()
                            .map(|p| p.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                });
            };
            let p = &self.params[i];
            if !p.values.contains(v) {
                return Err(not_a_candidate(n, *v, &p.values));
            }
            c[i].1 = *v;
        }
        match self.broken(&c) {
            Some(why) => Err(format!("the configuration breaks a constraint: {why}")),
            None => Ok(c),
        }
    }
}

/// Why `v` cannot be given to parameter `name`.
pub(crate) fn not_a_candidate(name: &str, v: i64, values: &[i64]) -> String {
    let list: Vec<String> = values.iter().map(i64::to_string).collect();
    format!(
        "{v} is not a candidate of tune parameter `{name}` ({})",
        list.join(", ")
    )
}

/// Evaluates a constraint or step argument over a configuration.
pub(crate) fn eval(a: &Ast, c: &Config) -> Result<i64, (Span, String)> {
    let b = |x: bool| i64::from(x);
    Ok(match &a.kind {
        AstKind::Int(v) => *v,
        AstKind::Name(n) => match c.iter().find(|(p, _)| p == n) {
            Some((_, v)) => *v,
            None => {
                return Err((
                    a.span,
                    format!(
                        "`{n}` is not a tune parameter (they are: {})",
                        c.iter()
                            .map(|(p, _)| p.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ))
            }
        },
        AstKind::Unary(UnaryOp::Neg, x) => eval(x, c)?
            .checked_neg()
            .ok_or((a.span, "overflow".to_string()))?,
        AstKind::Unary(UnaryOp::Not, x) => b(eval(x, c)? == 0),
        AstKind::Binary(op, l, r) => {
            let (x, y) = (eval(l, c)?, eval(r, c)?);
            let over = || (a.span, "overflows".to_string());
            match op {
                BinaryOp::Add => x.checked_add(y).ok_or_else(over)?,
                BinaryOp::Sub => x.checked_sub(y).ok_or_else(over)?,
                BinaryOp::Mul => x.checked_mul(y).ok_or_else(over)?,
                BinaryOp::Div | BinaryOp::Rem if y == 0 => {
                    return Err((a.span, "divides by zero".into()))
                }
                BinaryOp::Div => x.div_euclid(y),
                BinaryOp::Rem => x.rem_euclid(y),
                BinaryOp::Eq => b(x == y),
                BinaryOp::Ne => b(x != y),
                BinaryOp::Lt => b(x < y),
                BinaryOp::Le => b(x <= y),
                BinaryOp::Gt => b(x > y),
                BinaryOp::Ge => b(x >= y),
                BinaryOp::And => b(x != 0 && y != 0),
                BinaryOp::Or => b(x != 0 || y != 0),
                BinaryOp::BitAnd => x & y,
                BinaryOp::BitOr => x | y,
                BinaryOp::BitXor => x ^ y,
                BinaryOp::Shl | BinaryOp::Shr if !(0..63).contains(&y) => {
                    return Err((a.span, "shifts by a negative or too large amount".into()))
                }
                BinaryOp::Shl => x.checked_shl(y as u32).ok_or_else(over)?,
                BinaryOp::Shr => x >> y,
            }
        }
        _ => {
            return Err((
                a.span,
                "only integers, tune parameters and + - * / % comparisons && || are allowed here"
                    .into(),
            ))
        }
    })
}

/// Whether `a` mentions a tune parameter.
fn mentions(a: &Ast, c: &Config) -> bool {
    match &a.kind {
        AstKind::Name(n) => c.iter().any(|(p, _)| p == n),
        AstKind::Unary(_, x) => mentions(x, c),
        AstKind::Binary(_, l, r) => mentions(l, c) || mentions(r, c),
        _ => false,
    }
}

/// Replaces every step argument that mentions a tune parameter by its
/// value under `c` (keeping its span), so steps see integers.
pub(crate) fn substitute(s: &mut StepStmt, c: &Config) -> Result<(), Diagnostic> {
    if c.is_empty() {
        return Ok(());
    }
    for (r, span) in &s.results {
        if c.iter().any(|(p, _)| p == r) {
            return Err(Diagnostic::new(
                *span,
                format!("loop `{r}` has the name of a tune parameter"),
            )
            .hint("rename the loop or the parameter"));
        }
    }
    for arg in &mut s.args {
        if mentions(&arg.value, c) {
            let v = eval(&arg.value, c).map_err(|(span, m)| Diagnostic::new(span, m))?;
            arg.value.kind = AstKind::Int(v);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space() -> TuneSpace {
        let p = |n: &str, v: &[i64], d| TuneParam {
            name: n.into(),
            values: v.to_vec(),
            default: d,
            span: Span::default(),
        };
        let text = "A % B == 0";
        TuneSpace {
            params: vec![p("A", &[4, 6, 8], 8), p("B", &[2, 4], 4)],
            constraints: vec![Constraint {
                text: text.into(),
                ast: crate::syntax::parse_expr(text, 0).unwrap(),
                span: Span::default(),
            }],
        }
    }

    #[test]
    fn enumerates_every_configuration_once() {
        let s = space();
        assert_eq!(s.size(), 6);
        let all: Vec<Config> = (0..6).map(|i| s.nth(i).unwrap()).collect();
        assert_eq!(describe(&all[0]), "A=4 B=2");
        assert_eq!(describe(&all[5]), "A=8 B=4");
        for (i, a) in all.iter().enumerate() {
            assert!(!all[i + 1..].contains(a));
        }
        assert!(s.nth(6).is_none());
        let ok: Vec<String> = all
            .iter()
            .filter(|c| s.broken(c).is_none())
            .map(describe)
            .collect();
        assert_eq!(ok, ["A=4 B=2", "A=4 B=4", "A=6 B=2", "A=8 B=2", "A=8 B=4"]);
    }

    #[test]
    fn resolve_checks_names_candidates_and_constraints() {
        let s = space();
        assert_eq!(describe(&s.resolve(&[]).unwrap()), "A=8 B=4");
        assert_eq!(describe(&s.resolve(&[("A".into(), 4)]).unwrap()), "A=4 B=4");
        assert!(s
            .resolve(&[("C".into(), 4)])
            .unwrap_err()
            .contains("has: A, B"));
        assert!(s
            .resolve(&[("A".into(), 5)])
            .unwrap_err()
            .contains("4, 6, 8"));
        assert!(s
            .resolve(&[("A".into(), 6), ("B".into(), 4)])
            .unwrap_err()
            .contains("`A % B == 0` is false for A=6 B=4"));
    }

    #[test]
    fn assignments_parse() {
        assert_eq!(
            parse_assignments("A=4, B=2").unwrap(),
            [("A".to_string(), 4), ("B".to_string(), 2)]
        );
        assert!(parse_assignments("A").is_err());
        assert!(parse_assignments("A=x").is_err());
    }
}
