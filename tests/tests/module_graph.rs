//! Each crate's modules form floors: no module imports a module that imports it
//! (`docs/layers.md`). This test reads the paths each source file names (`use` lines and
//! paths written in code, `crate::`, `super::` and `self::` ones), resolves them to the
//! modules of the same crate, and finds the strongly connected groups of the graph. A
//! group of more than one file is allowed only if it has at most three files and every
//! file of it says why in its module documentation, with a line starting
//! `//! Module cycle:`.
//!
//! Edges to and from the crate root (`lib.rs`) do not count: the root declares the
//! modules and re-exports their items. A path through a re-export (`crate::Status`) counts
//! as naming the module the item comes from. Test modules (`tests.rs`, `#[cfg(test)] mod
//! tests`) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const CRATES: &[&str] = &["ucs", "uct", "ucp", "bindings-c"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every source file of a crate, by module path ("" for the root, "a::b").
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap();
            let mut parts: Vec<String> = rel
                .with_extension("")
                .iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect();
            if parts
                .last()
                .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
            {
                parts.pop();
            }
            if parts.last().is_some_and(|l| l == "tests") || parts.iter().any(|p| p == "bin") {
                continue;
            }
            out.insert(parts.join("::"), p);
        }
    }
    out
}

/// The text of a file without comments, string and char literals, and its test module.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            i += 2;
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3;
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            while i < b.len() && !(b[i] == b'\'' && b[i - 1] != b'\\' && i > 0) {
                i += 1;
            }
            i += 1;
        } else {
            out.push(b[i] as char);
            i += 1;
        }
    }
    out
}

/// Expands a `use` tree (`a::{b, c::{d, e}}`) into its paths.
fn expand(tree: &str) -> Vec<String> {
    let tree: String = tree.chars().filter(|c| !c.is_whitespace()).collect();
    fn go(prefix: &str, t: &str, out: &mut Vec<String>) {
        if let Some(open) = t.find('{') {
            let head = &t[..open];
            let inner = &t[open + 1..t.len().saturating_sub(1)];
            let mut depth = 0;
            let mut start = 0;
            for (i, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        go(&format!("{prefix}{head}"), &inner[start..i], out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            go(&format!("{prefix}{head}"), &inner[start..], out);
        } else if !t.is_empty() {
            let t = t.split(" as ").next().unwrap_or(t);
            out.push(format!("{prefix}{t}"));
        }
    }
    let mut out = Vec::new();
    go("", &tree, &mut out);
    out
}

/// The paths a file names: `use` trees expanded, and `crate::`/`super::`/`self::` paths
/// in code.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = rest[..i].chars().last();
        let after = &rest[i + 4..];
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(end) = after.find(';') {
            out.extend(expand(&after[..end]));
        }
    }
    let b = code.as_bytes();
    for kw in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(kw) {
            let at = from + i;
            from = at + kw.len();
            if at > 0
                && (b[at - 1].is_ascii_alphanumeric() || b[at - 1] == b'_' || b[at - 1] == b':')
            {
                continue;
            }
            let mut end = at;
            while end < b.len()
                && (b[end].is_ascii_alphanumeric() || b[end] == b'_' || b[end] == b':')
            {
                end += 1;
            }
            out.push(code[at..end].trim_end_matches(':').to_string());
        }
    }
    out
}

/// The crate root's re-exports: item name -> the path it re-exports.
fn reexports(root_code: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = root_code;
    while let Some(i) = rest.find("pub use ") {
        let after = &rest[i + 8..];
        rest = after;
        if let Some(end) = after.find(';') {
            for p in expand(&after[..end]) {
                if let Some(name) = p.rsplit("::").next() {
                    out.insert(name.to_string(), format!("crate::{p}"));
                }
            }
        }
    }
    out
}

/// The module a path names, from module `cur`: its longest prefix that is a module (a
/// root re-export followed to its source).
fn resolve_via(
    cur: &str,
    path: &str,
    mods: &BTreeMap<String, PathBuf>,
    re: &BTreeMap<String, String>,
) -> Option<String> {
    let r = resolve(cur, path, mods);
    if r.as_deref() != Some("") {
        return r;
    }
    // `crate::Item...`: the item the root re-exports.
    let first = path.strip_prefix("crate::")?.split("::").next()?;
    let target = re.get(first)?;
    resolve("", target, mods)
}

/// The module a path names, from module `cur`: its longest prefix that is a module.
fn resolve(cur: &str, path: &str, mods: &BTreeMap<String, PathBuf>) -> Option<String> {
    let mut segs: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<String> = match segs.first().copied() {
        Some("crate") => {
            segs.remove(0);
            Vec::new()
        }
        Some("super") | Some("self") => {
            let mut b: Vec<String> = if cur.is_empty() {
                Vec::new()
            } else {
                cur.split("::").map(String::from).collect()
            };
            while let Some(s) = segs.first().copied() {
                match s {
                    "super" => {
                        b.pop();
                        segs.remove(0);
                    }
                    "self" => {
                        segs.remove(0);
                    }
                    _ => break,
                }
            }
            b
        }
        _ => return None,
    };
    let mut best = None;
    if mods.contains_key(&base.join("::")) {
        best = Some(base.join("::"));
    }
    for s in segs {
        base.push(s.to_string());
        let m = base.join("::");
        if mods.contains_key(&m) {
            best = Some(m);
        }
    }
    best
}

/// Strongly connected components of more than one node (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        e: &'a BTreeMap<String, BTreeSet<String>>,
        idx: BTreeMap<String, usize>,
        low: BTreeMap<String, usize>,
        on: BTreeSet<String>,
        st: Vec<String>,
        n: usize,
        out: Vec<Vec<String>>,
    }
    fn visit(t: &mut T<'_>, v: &str) {
        t.idx.insert(v.to_string(), t.n);
        t.low.insert(v.to_string(), t.n);
        t.n += 1;
        t.st.push(v.to_string());
        t.on.insert(v.to_string());
        let next: Vec<String> =
            t.e.get(v)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default();
        for w in next {
            if !t.idx.contains_key(&w) {
                visit(t, &w);
                let lw = t.low[&w];
                let lv = t.low[v];
                t.low.insert(v.to_string(), lv.min(lw));
            } else if t.on.contains(&w) {
                let iw = t.idx[&w];
                let lv = t.low[v];
                t.low.insert(v.to_string(), lv.min(iw));
            }
        }
        if t.low[v] == t.idx[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.st.pop() {
                t.on.remove(&w);
                let done = w == v;
                comp.push(w);
                if done {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        e: edges,
        idx: BTreeMap::new(),
        low: BTreeMap::new(),
        on: BTreeSet::new(),
        st: Vec::new(),
        n: 0,
        out: Vec::new(),
    };
    let nodes: Vec<String> = edges.keys().cloned().collect();
    for v in nodes {
        if !t.idx.contains_key(&v) {
            visit(&mut t, &v);
        }
    }
    t.out
}

/// The module graph of one crate: module -> modules it names.
fn graph(
    krate: &str,
) -> (
    BTreeMap<String, PathBuf>,
    BTreeMap<String, BTreeSet<String>>,
) {
    let src = root().join(krate).join("src");
    let mods = modules(&src);
    let re = reexports(&code_of(&std::fs::read_to_string(&mods[""]).unwrap()));
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (m, file) in &mods {
        let code = code_of(&std::fs::read_to_string(file).unwrap());
        let e = edges.entry(m.clone()).or_default();
        if m.is_empty() {
            continue;
        }
        // Names bound to modules in this file: its child modules, and modules brought in
        // by `use` (`use crate::tl;` then `tl::tcp::open()`).
        let mut bound: BTreeMap<String, String> = BTreeMap::new();
        let prefix = format!("{m}::");
        for c in mods.keys() {
            if let Some(rest) = c.strip_prefix(&prefix) {
                if !rest.contains("::") {
                    bound.insert(rest.to_string(), c.clone());
                }
            }
        }
        for p in paths(&code) {
            if let Some(t) = resolve_via(m, &p, &mods, &re) {
                if p.ends_with(&format!("::{}", t.rsplit("::").next().unwrap_or("")))
                    && !t.is_empty()
                {
                    bound.insert(t.rsplit("::").next().unwrap_or("").to_string(), t.clone());
                }
                if !t.is_empty() && t != *m {
                    e.insert(t);
                }
            }
        }
        let bytes = code.as_bytes();
        for (name, target) in &bound {
            let pat = format!("{name}::");
            let mut from = 0;
            while let Some(i) = code[from..].find(&pat) {
                let at = from + i;
                from = at + pat.len();
                if at > 0
                    && (bytes[at - 1].is_ascii_alphanumeric()
                        || bytes[at - 1] == b'_'
                        || bytes[at - 1] == b':')
                {
                    continue;
                }
                let mut end = at;
                while end < bytes.len()
                    && (bytes[end].is_ascii_alphanumeric()
                        || bytes[end] == b'_'
                        || bytes[end] == b':')
                {
                    end += 1;
                }
                let rest = code[at + name.len()..end].trim_end_matches(':');
                let full = format!("crate::{target}{rest}");
                if let Some(t) = resolve("", &full, &mods) {
                    if !t.is_empty() && t != *m {
                        e.insert(t);
                    }
                }
            }
        }
    }
    (mods, edges)
}

#[test]
fn no_module_imports_a_module_that_imports_it() {
    let mut bad = Vec::new();
    for krate in CRATES {
        let (mods, edges) = graph(krate);
        for comp in cycles(&edges) {
            let explained = comp.len() <= 3
                && comp.iter().all(|m| {
                    std::fs::read_to_string(&mods[m])
                        .unwrap()
                        .lines()
                        .any(|l| l.starts_with("//! Module cycle:"))
                });
            if !explained {
                bad.push(format!(
                    "{krate}: {} modules: {}",
                    comp.len(),
                    comp.join(", ")
                ));
            }
        }
    }
    if std::env::var("RUCX_MODULE_GRAPH").is_ok() {
        for krate in CRATES {
            let (_, edges) = graph(krate);
            for (m, e) in &edges {
                eprintln!(
                    "{krate} {m} -> {}",
                    e.iter().cloned().collect::<Vec<_>>().join(" ")
                );
            }
        }
    }
    assert!(
        bad.is_empty(),
        "module cycles (docs/layers.md):\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_reader_sees_what_a_use_line_names() {
    let p = paths("use super::{rma::AtomicOp, Core};\nfn f() { crate::buf::with_raw(1); }");
    assert!(p.contains(&"super::rma::AtomicOp".to_string()), "{p:?}");
    assert!(p.contains(&"super::Core".to_string()), "{p:?}");
    assert!(p.contains(&"crate::buf::with_raw".to_string()), "{p:?}");
    let mut mods = BTreeMap::new();
    for m in ["", "buf", "worker", "worker::rma"] {
        mods.insert(m.to_string(), PathBuf::new());
    }
    assert_eq!(
        resolve("worker::tag", "super::rma::AtomicOp", &mods).as_deref(),
        Some("worker::rma")
    );
    assert_eq!(
        resolve("worker::tag", "super::Core", &mods).as_deref(),
        Some("worker")
    );
    assert_eq!(
        resolve("worker", "crate::buf::with_raw", &mods).as_deref(),
        Some("buf")
    );
    let mut e: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    e.entry("a".into()).or_default().insert("b".into());
    e.entry("b".into()).or_default().insert("a".into());
    e.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycles(&e), vec![vec!["a".to_string(), "b".to_string()]]);
}
