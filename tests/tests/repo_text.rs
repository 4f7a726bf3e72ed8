//! The repository's text, checked as text:
//! - no tracked file cites the project's old internal measurement counter (the word for a
//!   halt followed by a number), which no reader can resolve: cite a date, a commit or a
//!   section of a document instead;
//! - `docs/results.md` and its plots are what `contrib/bench/results.py` makes of
//!   `docs/results/data/`, so the page never drifts from its data.
//!
//! Both skip, saying so, where `git` or `python3` is missing, and fail instead under
//! `RUCX_CI=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn skip_or_fail(what: &str) {
    if std::env::var_os("RUCX_CI").is_some_and(|v| v == "1") {
        panic!("{what} (RUCX_CI=1: not skipped)");
    }
    eprintln!("SKIPPED: {what}");
}

/// The counter's word, built so that this file does not contain the phrase it looks for.
fn word() -> String {
    ["st", "op"].concat()
}

/// Byte offsets in `text` where the word (whole, any case, optionally plural) is followed
/// by spaces or tabs and a digit: `\bstops?[ \t]+[0-9]`.
fn citations(text: &str) -> Vec<usize> {
    let lower = text.to_ascii_lowercase();
    let b = lower.as_bytes();
    let w = word();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(i) = lower[from..].find(&w).map(|i| i + from) {
        from = i + 1;
        let before_ok = i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        let mut j = i + w.len();
        if j < b.len() && b[j] == b's' {
            j += 1;
        }
        let spaces = j;
        while j < b.len() && (b[j] == b' ' || b[j] == b'\t') {
            j += 1;
        }
        if before_ok && j > spaces && j < b.len() && b[j].is_ascii_digit() {
            found.push(i);
        }
    }
    found
}

#[test]
fn the_pattern_is_what_it_says() {
    let w = word();
    let cap = format!("{}{}", w[..1].to_uppercase(), &w[1..]);
    assert_eq!(citations(&format!("see {w} 49 and {cap}s 45–47")).len(), 2);
    assert_eq!(citations(&format!("({w}\t52's figures)")).len(), 1);
    assert!(citations(&format!("non{w} 5, {w}, {w}watch 3, {w}-44, {w} the 2")).is_empty());
}

#[test]
fn no_tracked_file_cites_the_old_counter() {
    let root = root();
    let out = match Command::new("git")
        .arg("-C")
        .arg(&root)
        .args(["ls-files", "-z"])
        .output()
    {
        Ok(o) if o.status.success() => o.stdout,
        _ => return skip_or_fail("git ls-files did not run (no git, or not a checkout)"),
    };
    let me = Path::new(file!()).file_name().expect("this file's name");
    let mut hits = Vec::new();
    for name in out.split(|&c| c == 0).filter(|n| !n.is_empty()) {
        let rel = Path::new(std::str::from_utf8(name).expect("a UTF-8 path"));
        if rel.starts_with("tests/tests") && rel.file_name() == Some(me) {
            continue;
        }
        // A tracked file deleted in the working tree, or a directory (a submodule).
        let Ok(bytes) = std::fs::read(root.join(rel)) else {
            continue;
        };
        let text = String::from_utf8_lossy(&bytes);
        for at in citations(&text) {
            let line = text[..at].matches('\n').count() + 1;
            let end = text[at..].find('\n').map_or(text.len(), |e| at + e);
            let start = text[..at].rfind('\n').map_or(0, |s| s + 1);
            hits.push(format!(
                "{}:{line}: {}",
                rel.display(),
                text[start..end].trim()
            ));
        }
    }
    assert!(
        hits.is_empty(),
        "{} place(s) cite the old internal counter; give a date, a commit or a document \
         section instead:\n{}",
        hits.len(),
        hits.join("\n")
    );
}

#[test]
fn results_md_is_what_its_data_makes() {
    let root = root();
    let out = match Command::new("python3")
        .arg(root.join("contrib/bench/results.py"))
        .arg("--check")
        .output()
    {
        Ok(o) => o,
        Err(e) => return skip_or_fail(&format!("python3 did not start: {e}")),
    };
    assert!(
        out.status.success(),
        "docs/results.md is out of date with docs/results/data (run `python3 \
         contrib/bench/results.py`):\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
