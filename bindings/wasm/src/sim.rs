//! `simulate`: homa-sim, the simulator that reproduces the paper, in the second module.

use homa_core::Value;
use homa_sim::{Mode, SimConfig, Stop, Workload};
use js_sys::Object;
use wasm_bindgen::prelude::*;

use crate::{failure, range_error, set, type_error, value};

/// Runs the simulator (homa-sim, the paper's setup): `options` picks `workload` ('w1' to
/// 'w5', or `{ name, cdf }` with a CDF's text), `load` (0 to 1), `hosts`, `messages`,
/// `warmup` (the share of the run before measuring starts, 0.1 by default), `bins` (about
/// how many size bins to report; the paper's by default), `seed`, `oracle` and `mode`
/// ('oneway' or 'rpc'); `onProgress({ now, done, total })` is called as it goes and once at
/// the end. Returns the report (`homa sim --json`'s object).
#[wasm_bindgen(unchecked_return_type = "Record<string, any>")]
pub fn simulate(
    #[wasm_bindgen(unchecked_param_type = "SimulateOptions")] options: Object,
    #[wasm_bindgen(
        unchecked_optional_param_type = "(progress: { now: number; done: number; total: number }) => void"
    )]
    on_progress: Option<js_sys::Function>,
) -> Result<JsValue, JsValue> {
    let cfg = sim_config(&options)?;
    // A callback that throws is not the run's business: its errors are dropped.
    let tell = |now: u64, done: u64, total: u64| {
        if let Some(f) = &on_progress {
            let o = Object::new();
            set(&o, "now", now as f64);
            set(&o, "done", done as f64);
            set(&o, "total", total as f64);
            let _ = f.call1(&JsValue::NULL, &o);
        }
    };
    let mut progress = |p: &homa_sim::Progress| tell(p.now, p.measured_done, p.measured_total);
    let report = homa_sim::run(&cfg, &mut progress).map_err(|e| failure("simulation", e))?;
    tell(report.work.sim_end_ns, report.measured.completed, report.measured.messages);
    js_sys::JSON::parse(&report.to_json())
}

/// The names `simulate` takes.
const OPTIONS: [&str; 9] =
    ["workload", "load", "hosts", "messages", "warmup", "bins", "seed", "oracle", "mode"];

/// The simulator's options (see `simulate`) as a run configuration.
pub(crate) fn sim_config(options: &Object) -> Result<SimConfig, JsValue> {
    let Value::Map(o) = value::from_js(options, "options")? else {
        return Err(type_error("the options must be an object"));
    };
    for (name, _) in o.iter() {
        if !OPTIONS.contains(&name) {
            return Err(type_error(format!(
                "unknown option {name:?}; the options are {}",
                OPTIONS.join(", ")
            )));
        }
    }
    let workload = match o.get("workload") {
        None | Some(Value::Null) => Workload::builtin("w4").expect("built in"),
        Some(Value::Str(name)) => Workload::builtin(name).ok_or_else(|| {
            let names: Vec<_> = Workload::builtin_names().collect();
            range_error(format!(
                "workload must be one of {}, or {{ name, cdf }}, not {name:?}",
                names.join(", ")
            ))
        })?,
        // A CDF as data: `size cumulative_probability` lines, as in a workload file.
        Some(Value::Map(w)) => {
            let name = w.get("name").and_then(Value::as_str).unwrap_or("custom");
            let cdf = w.get("cdf").and_then(Value::as_str).ok_or_else(|| {
                type_error(
                    "workload.cdf must be the CDF's text: `size cumulative_probability` lines",
                )
            })?;
            Workload::parse(name, cdf).map_err(|e| failure("workload", e))?
        }
        Some(_) => return Err(type_error("workload must be 'w1' to 'w5' or { name, cdf }")),
    };
    let number = |key: &str| match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Int(i)) => Ok(Some(*i as f64)),
        Some(Value::Float(x)) => Ok(Some(*x)),
        Some(_) => Err(type_error(format!("{key} must be a number"))),
    };
    let load = number("load")?.unwrap_or(0.5);
    if !(load > 0.0 && load <= 1.0) {
        return Err(range_error(format!("load must be above 0 and at most 1, not {load}")));
    }
    let whole = |key: &str, default: u64, min: u64, max: u64| -> Result<u64, JsValue> {
        let v = number(key)?.unwrap_or(default as f64);
        if v.fract() != 0.0 || v < min as f64 || v > max as f64 {
            return Err(range_error(format!(
                "{key} must be a whole number from {min} to {max}, not {v}"
            )));
        }
        Ok(v as u64)
    };
    let mut cfg = SimConfig::paper(workload, load);
    cfg.topology.hosts = whole("hosts", 16, 2, 1024)? as usize;
    cfg.stop = Stop::Messages(whole("messages", 2_000, 1, 10_000_000)?);
    if let Some(warmup) = number("warmup")? {
        if !(0.0..1.0).contains(&warmup) {
            return Err(range_error(format!(
                "warmup must be at least 0 and below 1, not {warmup}"
            )));
        }
        cfg.warmup = warmup;
    }
    if number("bins")?.is_some() {
        let bins = whole("bins", 0, 1, 1000)?;
        cfg.bins = homa_sim::report::auto_bins(&cfg.workload, 1.0 / bins as f64);
    }
    cfg.seed = whole("seed", 1, 0, u64::from(u32::MAX))?;
    cfg.oracle = match o.get("oracle") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(type_error("oracle must be a boolean")),
    };
    cfg.mode = match o.get("mode") {
        None | Some(Value::Null) => Mode::OneWay,
        Some(Value::Str(m)) if m == "oneway" => Mode::OneWay,
        Some(Value::Str(m)) if m == "rpc" => Mode::Rpc,
        Some(m) => return Err(range_error(format!("mode must be 'oneway' or 'rpc', not {m}"))),
    };
    if cfg.oracle && cfg.mode == Mode::Rpc {
        return Err(range_error("the oracle models one-way messages only: use mode 'oneway'"));
    }
    Ok(cfg)
}
