//! The small expression language inside kernel.toml strings.
//!
//! Three things are written in it: compute statements
//! (`C[i, j] = A[i, j] * alpha + B[j]`), size expressions in shapes
//! (`n + 2`), and schedule steps (`io, ii = split(i, 64)`). All share one
//! lexer and one expression grammar; spans are byte offsets in the kernel
//! file, so errors point into the original text.

use crate::diag::{Diagnostic, Span};

#[derive(Clone, Debug, PartialEq)]
pub enum Tok {
    Int(i64),
    Float(f64),
    Ident(String),
    Sym(&'static str),
    Eof,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    span: Span,
}

const SYMBOLS: [&str; 30] = [
    "==", "!=", "<=", ">=", "&&", "||", "->", "+=", "|=", "&=", "<<", ">>", "+", "-", "*", "/",
    "%", "(", ")", "[", "]", ",", "=", "<", ">", "!", ".", "&", "|", "^",
];

fn lex(text: &str, base: usize) -> Result<Vec<Token>, Diagnostic> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let start = i;
        if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let mut is_float = false;
            if i < bytes.len()
                && bytes[i] == b'.'
                && bytes.get(i + 1).is_some_and(|b| b.is_ascii_digit())
            {
                is_float = true;
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_alphanumeric() {
                    i += 1;
                }
            }
            // exponent with sign, e.g. 1e-5
            if i < bytes.len()
                && (bytes[i] == b'-' || bytes[i] == b'+')
                && matches!(bytes[i - 1], b'e' | b'E')
                && !text[start..i].starts_with("0x")
            {
                is_float = true;
                i += 1;
                while i < bytes.len() && bytes[i].is_ascii_digit() {
                    i += 1;
                }
            }
            let s = &text[start..i];
            let span = Span::new(base + start, base + i);
            let digits = s.replace('_', "");
            let hex = digits.starts_with("0x");
            let tok = if !hex && (is_float || digits.contains(['e', 'E'])) {
                digits
                    .parse::<f64>()
                    .map(Tok::Float)
                    .map_err(|_| Diagnostic::new(span, format!("invalid number `{s}`")))?
            } else if let Some(hex) = digits.strip_prefix("0x") {
                // Masks and bit patterns: `0xff`, `0x7fff_ffff`.
                i64::from_str_radix(hex, 16).map(Tok::Int).map_err(|_| {
                    Diagnostic::new(span, format!("invalid integer `{s}`"))
                        .label("not a hexadecimal integer that fits in 64 bits")
                })?
            } else {
                digits.parse::<i64>().map(Tok::Int).map_err(|_| {
                    Diagnostic::new(span, format!("invalid integer `{s}`"))
                        .label("not a decimal integer that fits in 64 bits")
                })?
            };
            out.push(Token { tok, span });
            continue;
        }
        if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            out.push(Token {
                tok: Tok::Ident(text[start..i].to_string()),
                span: Span::new(base + start, base + i),
            });
            continue;
        }
        if let Some(sym) = SYMBOLS.iter().find(|s| text[i..].starts_with(**s)) {
            i += sym.len();
            out.push(Token {
                tok: Tok::Sym(sym),
                span: Span::new(base + start, base + i),
            });
            continue;
        }
        let ch = text[i..].chars().next().unwrap_or('?');
        return Err(Diagnostic::new(
            Span::new(base + i, base + i + ch.len_utf8()),
            format!("unexpected character `{ch}`"),
        ));
    }
    out.push(Token {
        tok: Tok::Eof,
        span: Span::new(base + text.len(), base + text.len()),
    });
    Ok(out)
}

/// A parsed expression with its span.
#[derive(Clone, Debug, PartialEq)]
pub struct Ast {
    pub kind: AstKind,
    pub span: Span,
}

#[derive(Clone, Debug, PartialEq)]
pub enum AstKind {
    Int(i64),
    Float(f64),
    /// A name, possibly dotted (`blockIdx.x`).
    Name(String),
    /// `T[i, j]`
    Access {
        name: String,
        name_span: Span,
        indices: Vec<Ast>,
    },
    /// `f(a, b, key=c)`
    Call {
        name: String,
        name_span: Span,
        args: Vec<Arg>,
    },
    Unary(UnaryOp, Box<Ast>),
    Binary(BinaryOp, Box<Ast>, Box<Ast>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct Arg {
    pub key: Option<(String, Span)>,
    pub value: Ast,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnaryOp {
    Neg,
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Or,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

impl BinaryOp {
    pub fn symbol(self) -> &'static str {
        match self {
            BinaryOp::Add => "+",
            BinaryOp::Sub => "-",
            BinaryOp::Mul => "*",
            BinaryOp::Div => "/",
            BinaryOp::Rem => "%",
            BinaryOp::Eq => "==",
            BinaryOp::Ne => "!=",
            BinaryOp::Lt => "<",
            BinaryOp::Le => "<=",
            BinaryOp::Gt => ">",
            BinaryOp::Ge => ">=",
            BinaryOp::And => "&&",
            BinaryOp::Or => "||",
            BinaryOp::BitAnd => "&",
            BinaryOp::BitOr => "|",
            BinaryOp::BitXor => "^",
            BinaryOp::Shl => "<<",
            BinaryOp::Shr => ">>",
        }
    }
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinaryOp::Eq | BinaryOp::Ne | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Gt | BinaryOp::Ge
        )
    }
}

/// `C[i, j] = expr`, or a scatter `H[X[i]] += expr`.
#[derive(Clone, Debug, PartialEq)]
pub struct ComputeStmt {
    pub target: String,
    pub target_span: Span,
    /// The output's axes (empty for a scatter).
    pub axes: Vec<(String, Span)>,
    /// A scatter's combining operator (`+=`, `max=`, `min=`) and its
    /// subscripts, expressions of the axes of `over`.
    pub scatter: Option<ScatterLhs>,
    /// The other tensors of a tuple reduction (`M[r], S[r] = reduce(...)`),
    /// indexed by the same axes as the first, or by all but its last (an
    /// attention's row statistic, `O[i, d], L[i] = attention(...)`).
    pub more: Vec<(String, Span)>,
    /// How many of the first tensor's axes each of `more` takes.
    pub more_rank: Vec<usize>,
    pub value: Ast,
}

/// The left side of a scatter: `H[X[i], j] += ...`.
#[derive(Clone, Debug, PartialEq)]
pub struct ScatterLhs {
    /// `+`, `max`, `min`, `|` or `&`.
    pub op: &'static str,
    pub op_span: Span,
    pub indices: Vec<Ast>,
}

/// `a, b = step(args)` or `step(args)`
#[derive(Clone, Debug, PartialEq)]
pub struct StepStmt {
    pub results: Vec<(String, Span)>,
    pub name: String,
    pub name_span: Span,
    pub args: Vec<Arg>,
    pub span: Span,
}

struct Parser {
    toks: Vec<Token>,
    pos: usize,
    /// Current nesting of expressions; bounded so hostile input cannot overflow the stack.
    depth: usize,
}

/// Deeper nesting than any real kernel needs.
const MAX_DEPTH: usize = 200;

type PResult<T> = Result<T, Diagnostic>;

impl Parser {
    fn new(text: &str, base: usize) -> PResult<Parser> {
        Ok(Parser {
            toks: lex(text, base)?,
            pos: 0,
            depth: 0,
        })
    }
    fn peek(&self) -> &Tok {
        &self.toks[self.pos].tok
    }
    fn peek_at(&self, k: usize) -> &Tok {
        &self.toks[(self.pos + k).min(self.toks.len() - 1)].tok
    }
    fn span(&self) -> Span {
        self.toks[self.pos].span
    }
    fn prev_span(&self) -> Span {
        self.toks[self.pos.saturating_sub(1)].span
    }
    fn bump(&mut self) -> Token {
        let t = self.toks[self.pos].clone();
        if self.pos < self.toks.len() - 1 {
            self.pos += 1;
        }
        t
    }
    fn eat(&mut self, sym: &str) -> bool {
        if *self.peek() == Tok::Sym(leak(sym)) {
            self.bump();
            true
        } else {
            false
        }
    }
    fn expect(&mut self, sym: &str, what: &str) -> PResult<Span> {
        if self.eat(sym) {
            Ok(self.prev_span())
        } else {
            Err(self.unexpected(&format!("expected `{sym}` {what}")))
        }
    }
    fn unexpected(&self, msg: &str) -> Diagnostic {
        let found = match self.peek() {
            Tok::Eof => "end of text".to_string(),
            Tok::Int(v) => format!("`{v}`"),
            Tok::Float(v) => format!("`{v}`"),
            Tok::Ident(s) => format!("`{s}`"),
            Tok::Sym(s) => format!("`{s}`"),
        };
        Diagnostic::new(self.span(), format!("{msg}, found {found}"))
    }
    fn ident(&mut self, what: &str) -> PResult<(String, Span)> {
        match self.peek().clone() {
            Tok::Ident(s) => {
                let sp = self.bump().span;
                Ok((s, sp))
            }
            _ => Err(self.unexpected(&format!("expected {what}"))),
        }
    }
    fn end(&self) -> PResult<()> {
        match self.peek() {
            Tok::Eof => Ok(()),
            _ => Err(self.unexpected("expected end of expression")),
        }
    }

    fn expr(&mut self) -> PResult<Ast> {
        self.binary(0)
    }

    /// `[a, b, ...]` after a tensor name on the left of `=`, or nothing.
    fn subscripts(&mut self) -> PResult<Vec<Ast>> {
        let mut subs = Vec::new();
        if self.eat("[") && !self.eat("]") {
            loop {
                subs.push(self.expr()?);
                if self.eat("]") {
                    break;
                }
                self.expect(",", "between subscripts")?;
            }
        }
        Ok(subs)
    }

    fn binary(&mut self, min_prec: u8) -> PResult<Ast> {
        let mut lhs = self.unary()?;
        loop {
            let (op, prec) = match self.peek() {
                // C's precedence.
                Tok::Sym("||") => (BinaryOp::Or, 1),
                Tok::Sym("&&") => (BinaryOp::And, 2),
                Tok::Sym("|") => (BinaryOp::BitOr, 3),
                Tok::Sym("^") => (BinaryOp::BitXor, 4),
                Tok::Sym("&") => (BinaryOp::BitAnd, 5),
                Tok::Sym("==") => (BinaryOp::Eq, 6),
                Tok::Sym("!=") => (BinaryOp::Ne, 6),
                Tok::Sym("<") => (BinaryOp::Lt, 7),
                Tok::Sym("<=") => (BinaryOp::Le, 7),
                Tok::Sym(">") => (BinaryOp::Gt, 7),
                Tok::Sym(">=") => (BinaryOp::Ge, 7),
                Tok::Sym("<<") => (BinaryOp::Shl, 8),
                Tok::Sym(">>") => (BinaryOp::Shr, 8),
                Tok::Sym("+") => (BinaryOp::Add, 9),
                Tok::Sym("-") => (BinaryOp::Sub, 9),
                Tok::Sym("*") => (BinaryOp::Mul, 10),
                Tok::Sym("/") => (BinaryOp::Div, 10),
                Tok::Sym("%") => (BinaryOp::Rem, 10),
                _ => return Ok(lhs),
            };
            if prec < min_prec {
                return Ok(lhs);
            }
            self.bump();
            let rhs = self.binary(prec + 1)?;
            let span = lhs.span.to(rhs.span);
            lhs = Ast {
                kind: AstKind::Binary(op, Box::new(lhs), Box::new(rhs)),
                span,
            };
        }
    }

    fn unary(&mut self) -> PResult<Ast> {
        self.depth += 1;
        let r = self.unary_inner();
        self.depth -= 1;
        r
    }

    fn unary_inner(&mut self) -> PResult<Ast> {
        let start = self.span();
        if self.depth > MAX_DEPTH {
            return Err(Diagnostic::new(
                start,
                format!("expression nested more than {MAX_DEPTH} levels deep"),
            ));
        }
        let op = if self.eat("-") {
            UnaryOp::Neg
        } else if self.eat("!") {
            UnaryOp::Not
        } else {
            return self.primary();
        };
        let inner = self.unary()?;
        let span = start.to(inner.span);
        // Fold negative literals so `-1` is a constant, not an operation.
        Ok(match (op, inner.kind) {
            (UnaryOp::Neg, AstKind::Int(v)) => Ast {
                kind: AstKind::Int(-v),
                span,
            },
            (UnaryOp::Neg, AstKind::Float(v)) => Ast {
                kind: AstKind::Float(-v),
                span,
            },
            (op, kind) => Ast {
                kind: AstKind::Unary(
                    op,
                    Box::new(Ast {
                        kind,
                        span: inner.span,
                    }),
                ),
                span,
            },
        })
    }

    fn primary(&mut self) -> PResult<Ast> {
        let start = self.span();
        match self.peek().clone() {
            Tok::Int(v) => {
                self.bump();
                Ok(Ast {
                    kind: AstKind::Int(v),
                    span: start,
                })
            }
            Tok::Float(v) => {
                self.bump();
                Ok(Ast {
                    kind: AstKind::Float(v),
                    span: start,
                })
            }
            Tok::Sym("(") => {
                self.bump();
                let e = self.expr()?;
                self.expect(")", "to close `(`")?;
                Ok(Ast {
                    kind: e.kind,
                    span: start.to(self.prev_span()),
                })
            }
            Tok::Ident(name) => {
                self.bump();
                let mut name = name;
                let mut name_span = start;
                while *self.peek() == Tok::Sym(".") && matches!(self.peek_at(1), Tok::Ident(_)) {
                    self.bump();
                    let (part, sp) = self.ident("a name after `.`")?;
                    name.push('.');
                    name.push_str(&part);
                    name_span = name_span.to(sp);
                }
                if self.eat("[") {
                    let mut indices = Vec::new();
                    if !self.eat("]") {
                        loop {
                            indices.push(self.expr()?);
                            if self.eat("]") {
                                break;
                            }
                            self.expect(",", "between indices")?;
                        }
                    }
                    return Ok(Ast {
                        kind: AstKind::Access {
                            name,
                            name_span,
                            indices,
                        },
                        span: start.to(self.prev_span()),
                    });
                }
                if self.eat("(") {
                    let args = self.args()?;
                    return Ok(Ast {
                        kind: AstKind::Call {
                            name,
                            name_span,
                            args,
                        },
                        span: start.to(self.prev_span()),
                    });
                }
                Ok(Ast {
                    kind: AstKind::Name(name),
                    span: name_span,
                })
            }
            _ => Err(self.unexpected("expected an expression")),
        }
    }

    /// Arguments after `(`, through the closing `)`.
    fn args(&mut self) -> PResult<Vec<Arg>> {
        let mut args = Vec::new();
        if self.eat(")") {
            return Ok(args);
        }
        loop {
            let key = match (self.peek().clone(), self.peek_at(1)) {
                (Tok::Ident(k), Tok::Sym("=")) => {
                    let sp = self.bump().span;
                    self.bump();
                    Some((k, sp))
                }
                _ => None,
            };
            let value = self.expr()?;
            args.push(Arg { key, value });
            if self.eat(")") {
                return Ok(args);
            }
            self.expect(",", "between arguments")?;
        }
    }
}

fn leak(s: &str) -> &'static str {
    SYMBOLS
        .iter()
        .find(|x| **x == s)
        .copied()
        .unwrap_or("\u{0}")
}

/// Parses a standalone expression (a shape entry, for instance).
pub fn parse_expr(text: &str, base: usize) -> PResult<Ast> {
    let mut p = Parser::new(text, base)?;
    let e = p.expr()?;
    p.end()?;
    Ok(e)
}

/// Parses `Target[axis, ...] = expression`, or a scatter
/// `Target[subscript, ...] += expression` (also `max=`, `min=`).
pub fn parse_compute(text: &str, base: usize) -> PResult<ComputeStmt> {
    let mut p = Parser::new(text, base)?;
    let (target, target_span) =
        p.ident("the name of the tensor this stage computes, as in `C[i] = A[i] + B[i]`")?;
    let subs = p.subscripts()?;
    let op_span = p.span();
    let op = match p.peek().clone() {
        Tok::Sym("+=") => Some("+"),
        Tok::Sym("|=") => Some("|"),
        Tok::Sym("&=") => Some("&"),
        Tok::Ident(n) if matches!(p.peek_at(1), Tok::Sym("=")) && (n == "max" || n == "min") => {
            p.bump();
            Some(if n == "max" { "max" } else { "min" })
        }
        _ => None,
    };
    let mut more = Vec::new();
    let mut more_rank = Vec::new();
    let (axes, scatter) = match op {
        Some(op) => {
            p.bump();
            let op_span = Span::new(op_span.start, p.prev_span().end);
            let lhs = ScatterLhs {
                op,
                op_span,
                indices: subs,
            };
            (Vec::new(), Some(lhs))
        }
        None => {
            let axes = plain_axes(subs)?;
            while p.eat(",") {
                let (name, span) = p.ident("the name of another tensor of a tuple reduction, as in `M[r], S[r] = reduce(...)`")?;
                let these = plain_axes(p.subscripts()?)?;
                let prefix = &axes[..these.len().min(axes.len())];
                let short = these.len() + 1 == axes.len();
                if (these.len() != axes.len() && !short)
                    || these.iter().map(|a| &a.0).ne(prefix.iter().map(|a| &a.0))
                {
                    return Err(Diagnostic::new(
                        span,
                        format!("`{name}` is indexed differently from `{target}`"),
                    )
                    .hint(
                        "every tensor of a tuple reduction takes the same axes in the same order (an attention's `L` all but the last)",
                    ));
                }
                more.push((name, span));
                more_rank.push(these.len());
            }
            p.expect("=", "after the computed tensor")?;
            (axes, None)
        }
    };
    let value = p.expr()?;
    p.end()?;
    Ok(ComputeStmt {
        target,
        target_span,
        axes,
        scatter,
        more,
        more_rank,
        value,
    })
}

/// The left side's subscripts as plain axis names.
fn plain_axes(subs: Vec<Ast>) -> PResult<Vec<(String, Span)>> {
    subs.into_iter()
        .map(|a| match a.kind {
            AstKind::Name(n) => Ok((n, a.span)),
            _ => Err(Diagnostic::new(
                a.span,
                "expected an axis name (the left side of `=` indexes the output by plain axis names)",
            )
            .hint("to combine into data-dependent places, write a scatter: `H[X[i]] += 1` with `over = { i = \"n\" }`")),
        })
        .collect()
}

/// Parses one schedule step, `a, b = split(i, 64)` or `bind(a, blockIdx.x)`.
pub fn parse_step(text: &str, base: usize) -> PResult<StepStmt> {
    let mut p = Parser::new(text, base)?;
    let start = p.span();
    let mut results = Vec::new();
    // Results are present when a `=` follows a comma-separated list of names.
    let mut k = 0;
    let has_results = loop {
        match (p.peek_at(k), p.peek_at(k + 1)) {
            (Tok::Ident(_), Tok::Sym(",")) => k += 2,
            (Tok::Ident(_), Tok::Sym("=")) => break true,
            _ => break false,
        }
    };
    if has_results {
        loop {
            results.push(p.ident("a loop name")?);
            if p.eat("=") {
                break;
            }
            p.expect(",", "between loop names")?;
        }
    }
    let (name, name_span) = p.ident("a schedule step such as `split`, `bind`, `reorder`")?;
    p.expect("(", &format!("after `{name}`"))?;
    let args = p.args()?;
    p.end()?;
    Ok(StepStmt {
        results,
        name,
        name_span,
        args,
        span: start.to(p.prev_span()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_statement_parses_with_spans() {
        let s = parse_compute("C[i] = A[i] + 2 * B[i]", 10).unwrap();
        assert_eq!(s.target, "C");
        assert_eq!(s.target_span, Span::new(10, 11));
        assert_eq!(s.axes, vec![("i".to_string(), Span::new(12, 13))]);
        match s.value.kind {
            AstKind::Binary(BinaryOp::Add, _, rhs) => {
                assert!(matches!(rhs.kind, AstKind::Binary(BinaryOp::Mul, _, _)))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn precedence_and_unary() {
        let e = parse_expr("-a * (b - 1) < 3 && !c", 0).unwrap();
        assert!(matches!(e.kind, AstKind::Binary(BinaryOp::And, _, _)));
        assert_eq!(parse_expr("-1", 0).unwrap().kind, AstKind::Int(-1));
        assert_eq!(parse_expr("1e-3", 0).unwrap().kind, AstKind::Float(1e-3));
        assert_eq!(parse_expr("2.5", 0).unwrap().kind, AstKind::Float(2.5));
    }

    #[test]
    fn step_with_results_and_dotted_names() {
        let s = parse_step("io, ii = split(i, factor=64)", 0).unwrap();
        assert_eq!(s.results.len(), 2);
        assert_eq!(s.name, "split");
        assert_eq!(s.args[1].key.as_ref().unwrap().0, "factor");
        let b = parse_step("bind(io, blockIdx.x)", 0).unwrap();
        assert!(b.results.is_empty());
        assert_eq!(b.args[1].value.kind, AstKind::Name("blockIdx.x".into()));
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!("{}1{}", "(".repeat(100_000), ")".repeat(100_000));
        assert!(parse_expr(&deep, 0)
            .unwrap_err()
            .message
            .contains("nested more than"));
        let negs = format!("{}1", "-(".repeat(50_000));
        assert!(parse_expr(&negs, 0).is_err());
        assert!(parse_expr(&format!("{}1{}", "(".repeat(50), ")".repeat(50)), 0).is_ok());
    }

    #[test]
    fn errors_point_at_the_token() {
        let e = parse_expr("a + * b", 100).unwrap_err();
        assert_eq!(e.span, Span::new(104, 105));
        assert!(
            e.message.contains("expected an expression"),
            "{}",
            e.message
        );
        let e = parse_compute("C[i] = A[i] $", 0).unwrap_err();
        assert!(e.message.contains("unexpected character"));
    }
}
