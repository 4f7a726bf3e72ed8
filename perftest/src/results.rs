//! The client's record of its runs: `--json` output, and the series `--plot` draws (from
//! this invocation's runs and from earlier `--json` files given with `--from`).
//!
//! ```text
//! { "tool": "rucx-perftest", "version": "0.1.0", "label": "...",
//!   "runs": [ { "test": "tag_lat", "kind": "latency", "transports": "posix,cma",
//!               "size": 8, "entries": [8], "send_layout": "contig", "recv_layout": "contig",
//!               "iterations": 1000, "warmup": 100, "percentile_rank": 50.0,
//!               "latency_us": { "percentile": 0.1, "average": 0.1, "overall": 0.1 },
//!               "bandwidth_mb_s": { "average": 76.2, "overall": 76.2 },
//!               "message_rate": { "average": 1.0e7, "overall": 1.0e7 },
//!               "ucx": { "program": "/usr/bin/ucx_perftest", "iterations": ..., ... } } ] }
//! ```
//!
//! Latency is in µs (one-way for ping-pong tests; the time per operation for streaming
//! tests, `ucx_perftest`'s "overhead"), bandwidth in MB/s (2^20 bytes), rates in messages
//! per second: the numbers of the `Final:` line.

use std::path::Path;

use serde_json::{json, Value};

use crate::args::{Args, UCT_TESTS};
use crate::report::{Kind, Row};
use crate::Error;

/// How each test reports (`ucx_perftest`'s test types).
pub fn kind_of(test: &str) -> Kind {
    match test {
        "get" | "ucp_get" | "ucp_fadd" | "ucp_swap" | "ucp_cswap" => Kind::OpLatency,
        t if t.ends_with("_lat") => Kind::Latency,
        _ => Kind::Bandwidth,
    }
}

fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Latency => "latency",
        Kind::Bandwidth => "bandwidth",
        Kind::OpLatency => "operation latency",
    }
}

fn kind_from_name(s: &str) -> Kind {
    match s {
        "latency" => Kind::Latency,
        "operation latency" => Kind::OpLatency,
        _ => Kind::Bandwidth,
    }
}

/// One run (one size) as the client saw it.
#[derive(Clone, Debug)]
pub struct RunResult {
    pub test: String,
    pub kind: Kind,
    pub transports: String,
    pub size: usize,
    /// The scatter-gather list (empty for named layouts).
    pub entries: Vec<usize>,
    pub send_layout: String,
    pub recv_layout: String,
    pub warmup: u64,
    pub rank: f64,
    pub row: Row,
    /// `ucx_perftest`'s final row (`--compare-ucx`), and the program that gave it.
    pub ucx: Option<(String, Row)>,
    /// The share of a CPU the client and the server each had during the run (for runs of
    /// at least a quarter second).
    pub cpu_share: Option<(Option<f64>, Option<f64>)>,
    /// A side had well under one CPU: the figures measure a shared core.
    pub contended: bool,
}

/// The lanes the last UCP run's endpoint used (`ucp::Worker::ep_lanes`), recorded when it
/// connected.
static LANES: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Records the lanes of this run's endpoint.
pub fn set_lanes(l: String) {
    *LANES.lock().unwrap_or_else(|e| e.into_inner()) = Some(l);
}

/// The transports a run used: a UCT test's transport and device; a UCP test's lanes as
/// its endpoint chose them (or, before it connected, `UCX_TLS` as given).
pub fn transports(args: &Args) -> String {
    if UCT_TESTS.contains(&args.test()) {
        return format!(
            "{}/{}",
            args.tl.as_deref().unwrap_or("?"),
            args.device.as_deref().unwrap_or("default")
        );
    }
    if let Some(l) = LANES.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        return l;
    }
    let mut t = std::env::var("UCX_TLS")
        .map_or_else(|_| "UCX_TLS unset".into(), |v| format!("UCX_TLS={v}"));
    if let Ok(d) = std::env::var("UCX_NET_DEVICES") {
        t.push_str(&format!(" ({d})"));
    }
    t
}

impl RunResult {
    pub fn new(args: &Args, row: Row, ucx: Option<(String, Row)>) -> Result<RunResult, Error> {
        let test = args.test().to_string();
        let uct = UCT_TESTS.contains(&test.as_str());
        let (send_layout, recv_layout) = if uct {
            let l = args.layout.clone().unwrap_or_else(|| "default".into());
            (l.clone(), l)
        } else {
            let (s, r) = args.ucp_layouts().map_err(Error::Usage)?;
            (s.name(), r.name())
        };
        let named = send_layout.contains(':') || recv_layout.contains(':');
        Ok(RunResult {
            kind: kind_of(&test),
            transports: transports(args),
            size: args.message_bytes().map_err(Error::Usage)?,
            entries: if named {
                Vec::new()
            } else {
                args.msg_sizes().map_err(Error::Usage)?
            },
            send_layout,
            recv_layout,
            warmup: args.warmup,
            rank: args.rank,
            row,
            ucx,
            test,
            cpu_share: None,
            contended: false,
        })
    }
}

fn row_json(r: &Row) -> Value {
    json!({
        "iterations": r.iters,
        "latency_us": { "percentile": r.lat_pct, "average": r.lat_avg, "overall": r.lat_overall },
        "bandwidth_mb_s": { "average": r.bw_avg, "overall": r.bw_overall },
        "message_rate": { "average": r.rate_avg, "overall": r.rate_overall },
    })
}

fn run_json(r: &RunResult) -> Value {
    let mut v = json!({
        "test": r.test,
        "kind": kind_name(r.kind),
        "transports": r.transports,
        "size": r.size,
        "entries": r.entries,
        "send_layout": r.send_layout,
        "recv_layout": r.recv_layout,
        "warmup": r.warmup,
        "percentile_rank": r.rank,
        "contended": r.contended,
    });
    if let (Value::Object(m), Some((c, sv))) = (&mut v, r.cpu_share) {
        m.insert("cpu_share".into(), json!({ "client": c, "server": sv }));
    }
    if let (Value::Object(m), Value::Object(row)) = (&mut v, row_json(&r.row)) {
        m.extend(row);
        if let Some((prog, u)) = &r.ucx {
            let mut uj = row_json(u);
            if let Value::Object(um) = &mut uj {
                um.insert("program".into(), json!(prog));
            }
            m.insert("ucx".into(), uj);
        }
    }
    v
}

/// The label of this invocation's line(s).
fn label(args: &Args, runs: &[RunResult]) -> String {
    if let Some(l) = &args.label {
        return l.clone();
    }
    match runs.first() {
        // The test names a line only when every run is of it (the default suite has
        // tag_lat and tag_bw runs: its lines are told apart by test in `group`).
        Some(r) if runs.iter().all(|x| x.test == r.test) => {
            format!("rucx {} [{}]", r.test, r.transports)
        }
        Some(r) => format!("rucx [{}]", r.transports),
        None => "rucx".into(),
    }
}

/// Writes the runs as JSON to `path` (`-`: stdout).
pub fn write_json(path: &Path, args: &Args, runs: &[RunResult]) -> Result<(), String> {
    let doc = json!({
        "tool": "rucx-perftest",
        "version": env!("CARGO_PKG_VERSION"),
        "label": label(args, runs),
        "runs": runs.iter().map(run_json).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&doc).map_err(|e| format!("--json: {e}"))?;
    if path == Path::new("-") {
        println!("{text}");
        Ok(())
    } else {
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }
}

/// One line of a plot: (size, latency µs, bandwidth MB/s) points of one test.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub label: String,
    pub kind: Kind,
    pub points: Vec<(usize, f64, f64)>,
}

/// The latency a plot shows: the percentile for latency tests (ucx_perftest's "typical"),
/// the overall time per message for streaming tests.
fn plot_latency(kind: Kind, r: &Row) -> f64 {
    match kind {
        Kind::Latency | Kind::OpLatency => r.lat_pct,
        Kind::Bandwidth => r.lat_overall,
    }
}

/// A run as the plot needs it: test, kind, size, our final row, the reference's.
type FlatRun = (String, Kind, usize, Row, Option<(String, Row)>);

/// Groups runs into lines: one per test (and one more per test compared with UCX).
fn group(base: &str, runs: &[FlatRun]) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    let mut tests: Vec<&str> = Vec::new();
    for (t, ..) in runs {
        if !tests.contains(&t.as_str()) {
            tests.push(t);
        }
    }
    let several = tests.len() > 1;
    for t in tests {
        let name = |who: &str| {
            if several {
                format!("{who} {t}")
            } else {
                who.to_string()
            }
        };
        let mine: Vec<_> = runs.iter().filter(|r| r.0 == t).collect();
        let kind = mine[0].1;
        let pts = |f: &dyn Fn(&FlatRun) -> Option<Row>| {
            let mut v: Vec<(usize, f64, f64)> = mine
                .iter()
                .filter_map(|r| f(r).map(|row| (r.2, plot_latency(kind, &row), row.bw_overall)))
                .collect();
            v.sort_by_key(|p| p.0);
            v
        };
        out.push(Series {
            label: name(base),
            kind,
            points: pts(&|r| Some(r.3)),
        });
        let ucx = pts(&|r| r.4.as_ref().map(|u| u.1));
        if !ucx.is_empty() {
            let prog = mine
                .iter()
                .find_map(|r| r.4.as_ref().map(|u| u.0.clone()))
                .unwrap_or_default();
            // The last path components tell the reference programs apart
            // (`ucx-1.22/wrap/ucx_perftest`, `usr/bin/ucx_perftest`).
            let parts: Vec<String> = Path::new(&prog)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .filter(|c| c != "/")
                .collect();
            let short = parts[parts.len().saturating_sub(3)..].join("/");
            out.push(Series {
                label: name(&short),
                kind,
                points: ucx,
            });
        }
    }
    out
}

/// The lines of this invocation's runs.
pub fn series(args: &Args, runs: &[RunResult]) -> Vec<Series> {
    let flat: Vec<_> = runs
        .iter()
        .map(|r| (r.test.clone(), r.kind, r.size, r.row, r.ucx.clone()))
        .collect();
    group(&label(args, runs), &flat)
}

fn row_from(v: &Value) -> Option<Row> {
    let f = |a: &str, b: &str| v.get(a)?.get(b)?.as_f64();
    Some(Row {
        iters: v.get("iterations")?.as_u64()?,
        lat_pct: f("latency_us", "percentile")?,
        lat_avg: f("latency_us", "average")?,
        lat_overall: f("latency_us", "overall")?,
        bw_avg: f("bandwidth_mb_s", "average")?,
        bw_overall: f("bandwidth_mb_s", "overall")?,
        rate_avg: f("message_rate", "average")?,
        rate_overall: f("message_rate", "overall")?,
    })
}

/// The lines of an earlier `--json` file.
pub fn read_series(path: &Path) -> Result<Vec<Series>, String> {
    let bad = |what: &str| format!("--from {}: {what}", path.display());
    let text = std::fs::read_to_string(path).map_err(|e| bad(&e.to_string()))?;
    let doc: Value = serde_json::from_str(&text).map_err(|e| bad(&format!("not JSON: {e}")))?;
    if doc.get("tool").and_then(Value::as_str) != Some("rucx-perftest") {
        return Err(bad("not a rucx-perftest --json file"));
    }
    let label = doc
        .get("label")
        .and_then(Value::as_str)
        .map(String::from)
        .unwrap_or_else(|| path.display().to_string());
    let runs = doc
        .get("runs")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no runs"))?;
    let mut flat = Vec::new();
    for r in runs {
        let test = r
            .get("test")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("a run without a test"))?;
        let kind = kind_from_name(r.get("kind").and_then(Value::as_str).unwrap_or(""));
        let size = r
            .get("size")
            .and_then(Value::as_u64)
            .ok_or_else(|| bad("a run without a size"))? as usize;
        let row = row_from(r).ok_or_else(|| bad("a run without its numbers"))?;
        let ucx = r.get("ucx").and_then(|u| {
            let prog = u
                .get("program")
                .and_then(Value::as_str)
                .unwrap_or("ucx_perftest");
            row_from(u).map(|row| (prog.to_string(), row))
        });
        flat.push((test.to_string(), kind, size, row, ucx));
    }
    Ok(group(&label, &flat))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn row(lat: f64, bw: f64) -> Row {
        Row {
            iters: 100,
            lat_pct: lat,
            lat_avg: lat,
            lat_overall: lat,
            bw_avg: bw,
            bw_overall: bw,
            rate_avg: 1.0,
            rate_overall: 1.0,
        }
    }

    #[test]
    fn kinds_follow_ucx_perftest() {
        assert_eq!(kind_of("tag_lat"), Kind::Latency);
        assert_eq!(kind_of("ucp_get"), Kind::OpLatency);
        assert_eq!(kind_of("ucp_fadd"), Kind::OpLatency);
        assert_eq!(kind_of("ucp_add"), Kind::Bandwidth);
        assert_eq!(kind_of("stream_bw"), Kind::Bandwidth);
        assert_eq!(kind_of("put_lat"), Kind::Latency);
    }

    #[test]
    fn json_round_trips_into_series() {
        let args =
            Args::try_parse_from(["p", "--loopback", "-t", "tag_lat", "-s", "8..16"]).unwrap();
        let mut runs = Vec::new();
        for (i, a) in args.runs().unwrap().iter().enumerate() {
            let ucx = Some(("/opt/ucx/bin/ucx_perftest".to_string(), row(2.0, 20.0)));
            runs.push(RunResult::new(a, row(1.0 + i as f64, 10.0), ucx).unwrap());
        }
        let dir = std::env::temp_dir().join(format!("rucx-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("r.json");
        write_json(&f, &args, &runs).unwrap();
        let s = read_series(&f).unwrap();
        assert_eq!(s, series(&args, &runs));
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].points, vec![(8, 1.0, 10.0), (16, 2.0, 10.0)]);
        assert_eq!(s[1].label, "ucx/bin/ucx_perftest");
        std::fs::write(&f, "{}").unwrap();
        assert!(read_series(&f).unwrap_err().contains("not a rucx-perftest"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_suite_of_two_tests_labels_each_line_by_its_own_test() {
        let args = Args::try_parse_from(["p", "--loopback"]).unwrap();
        let mut runs = Vec::new();
        for t in ["tag_lat", "tag_bw"] {
            let a = Args::try_parse_from(["p", "--loopback", "-t", t]).unwrap();
            runs.push(RunResult::new(&a, row(1.0, 10.0), None).unwrap());
        }
        assert!(!label(&args, &runs).contains("tag_lat"));
        let s = series(&args, &runs);
        let names: Vec<&str> = s.iter().map(|x| x.label.as_str()).collect();
        assert_eq!(names.len(), 2);
        assert!(names[0].ends_with(" tag_lat") && !names[0].contains("tag_bw"));
        assert!(names[1].ends_with(" tag_bw") && !names[1].contains("tag_lat"));
    }
}
