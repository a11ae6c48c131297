//! Diagnostics: errors as values that carry the source they point into.
//!
//! Every error found in a kernel file is a [`Diagnostic`] with a byte span in
//! that file. [`KernelError`] bundles the diagnostics with the file name and
//! text so it can be rendered as `file:line:col` plus the underlined source
//! line, the way compilers report errors.

use codespan_reporting::diagnostic::{Diagnostic as CsDiagnostic, Label};
use codespan_reporting::files::SimpleFile;
use codespan_reporting::term::{self, termcolor::NoColor};
use std::fmt;
use std::ops::Range;

/// A half-open byte range in a source file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Span {
        Span { start, end }
    }
    /// The smallest span covering both.
    pub fn to(self, other: Span) -> Span {
        Span::new(self.start.min(other.start), self.end.max(other.end))
    }
    pub fn range(self) -> Range<usize> {
        self.start..self.end
    }
}

/// One problem in a kernel file.
#[derive(Clone, Debug, PartialEq)]
pub struct Diagnostic {
    pub message: String,
    pub span: Span,
    /// Text under the underline; empty for none.
    pub label: String,
    /// Actionable suggestions, printed as `= help: ...`.
    pub hints: Vec<String>,
}

impl Diagnostic {
    pub fn new(span: Span, message: impl Into<String>) -> Diagnostic {
        Diagnostic {
            message: message.into(),
            span,
            label: String::new(),
            hints: Vec::new(),
        }
    }
    pub fn label(mut self, label: impl Into<String>) -> Diagnostic {
        self.label = label.into();
        self
    }
    pub fn hint(mut self, hint: impl Into<String>) -> Diagnostic {
        self.hints.push(hint.into());
        self
    }
    /// Adds "did you mean" hints for the names closest to `wrong`.
    pub fn suggest<'a>(
        self,
        wrong: &str,
        candidates: impl IntoIterator<Item = &'a str>,
    ) -> Diagnostic {
        let near = nearest(wrong, candidates);
        match near.len() {
            0 => self,
            _ => {
                let list = near
                    .iter()
                    .map(|s| format!("`{s}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                self.hint(format!("did you mean {list}?"))
            }
        }
    }
}

/// Up to three candidates close to `wrong`, best first.
pub fn nearest<'a>(wrong: &str, candidates: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let candidates: Vec<&str> = candidates.into_iter().collect();
    // A difference of case alone is the likeliest mistake: suggest only that.
    let same: Vec<String> = candidates
        .iter()
        .filter(|c| c.eq_ignore_ascii_case(wrong))
        .map(|c| c.to_string())
        .collect();
    if !same.is_empty() {
        return same;
    }
    let mut scored: Vec<(f64, &str)> = candidates
        .into_iter()
        .map(|c| {
            (
                strsim::jaro_winkler(&wrong.to_lowercase(), &c.to_lowercase()),
                c,
            )
        })
        .filter(|(s, _)| *s >= 0.75)
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored
        .into_iter()
        .take(3)
        .map(|(_, c)| c.to_string())
        .collect()
}

/// Diagnostics for one kernel file, with the file's name and text.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelError {
    pub file: String,
    pub source: String,
    pub diagnostics: Vec<Diagnostic>,
}

impl KernelError {
    /// Renders all diagnostics as plain text (no colour), compiler style.
    pub fn render(&self) -> String {
        let file = SimpleFile::new(self.file.as_str(), self.source.as_str());
        let mut out = NoColor::new(Vec::new());
        let config = term::Config::default();
        for d in &self.diagnostics {
            let span = clamp(d.span, self.source.len());
            let cs = CsDiagnostic::error()
                .with_message(&d.message)
                .with_labels(vec![Label::primary((), span.range()).with_message(&d.label)])
                .with_notes(d.hints.iter().map(|h| format!("help: {h}")).collect());
            // Writing into a Vec cannot fail; a failure here would be a bug in the renderer.
            let _ = term::emit(&mut out, &config, &file, &cs);
        }
        String::from_utf8_lossy(&out.into_inner()).into_owned()
    }

    /// `file:line:col` of the first diagnostic (1-based).
    pub fn location(&self) -> Option<(usize, usize)> {
        self.diagnostics
            .first()
            .map(|d| line_col(&self.source, d.span.start))
    }
}

fn clamp(span: Span, len: usize) -> Span {
    let start = span.start.min(len);
    Span::new(start, span.end.clamp(start, len))
}

/// 1-based line and column of a byte offset.
pub fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = &source[..floor_char_boundary(source, offset)];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.render().trim_end())
    }
}

impl std::error::Error for KernelError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_from_one() {
        let s = "ab\ncd\n";
        assert_eq!(line_col(s, 0), (1, 1));
        assert_eq!(line_col(s, 4), (2, 2));
    }

    #[test]
    fn nearest_finds_close_names() {
        assert_eq!(
            nearest("blockidx.x", ["blockIdx.x", "threadIdx.x"]),
            vec!["blockIdx.x"]
        );
        assert!(nearest("zzz", ["blockIdx.x"]).is_empty());
    }

    #[test]
    fn render_names_file_line_and_column() {
        let e = KernelError {
            file: "k.toml".into(),
            source: "a = 1\nb = oops\n".into(),
            diagnostics: vec![Diagnostic::new(Span::new(10, 14), "bad value").hint("try 2")],
        };
        let r = e.render();
        assert!(r.contains("k.toml:2:5"), "{r}");
        assert!(r.contains("^^^^"), "{r}");
        assert!(r.contains("help: try 2"), "{r}");
    }
}
