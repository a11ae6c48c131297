//! `rocmc targets` and `rocmc inspect`: what LLVM supports, what a code object holds.

use super::{hot_loops, io};
use crate::Error;
use std::io::Write;
use std::path::Path;

pub fn targets() -> Result<(), Error> {
    use crate::codegen::target;
    let mut out = String::new();
    out.push_str(&format!(
        "{:<16} {:<24} {:<17} {:>8}  {:<15} {}\n",
        "processor", "family", "waves", "LDS/WG", "features", "aliases"
    ));
    for p in target::canonical_processors() {
        let Some(info) = target::processor_info(&p) else {
            continue;
        };
        let hw = crate::linker::hw::hardware(&p);
        let waves = if info.wave32 {
            "32 (default), 64"
        } else {
            "64"
        };
        let feats: Vec<&str> = [
            ("xnack", info.supports_xnack),
            ("sramecc", info.supports_sramecc),
        ]
        .iter()
        .filter(|f| f.1)
        .map(|f| f.0)
        .collect();
        let extra = if p.contains("generic") {
            " [code object v6]"
        } else {
            ""
        };
        out.push_str(&format!(
            "{p:<16} {:<24} {waves:<17} {:>5} KiB  {:<15} {}{extra}\n",
            hw.family,
            hw.lds_per_workgroup / 1024,
            if feats.is_empty() {
                "-".to_string()
            } else {
                feats.join(", ")
            },
            target::aliases_of(&p).join(", ")
        ));
    }
    out.push_str("\nNVIDIA (PTX; the CUDA driver compiles it when it loads the module)\n");
    out.push_str(&format!(
        "{:<16} {:<24} {:<17} {:>8}  {:<15} {}\n",
        "processor", "compute capability", "warps", "smem/blk", "PTX ISA", "aliases"
    ));
    for p in target::nvptx::PROCESSORS {
        let t = crate::codegen::NvidiaTarget::parse(p.name).expect("a processor of the table");
        let (a, b) = t.compute_capability();
        let runs = match p.name.chars().last() {
            Some('a') => format!("{a}.{b} only"),
            Some('f') => format!("{a}.{b}+ ({a}.x)"),
            _ => format!("{a}.{b} and later"),
        };
        out.push_str(&format!(
            "{:<16} {runs:<24} {:<17} {:>5} KiB  {:<15} {}\n",
            p.name,
            "32",
            t.max_shared_per_block() / 1024,
            t.ptx_text(),
            target::nvptx::aliases_of(p.name).join(", ")
        ));
    }
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .map_err(io(Path::new("<stdout>")))
}

pub fn inspect(file: &Path, json: bool, loops: bool, sizes: &[(String, i64)]) -> Result<(), Error> {
    use crate::linker::{bundle, codeobject};
    let bytes = std::fs::read(file).map_err(io(file))?;
    let bad = |e: codeobject::ReadError| Error::Usage(format!("{}: {e}", file.display()));
    let read_code = |e: String| Error::Usage(format!("{}: {e}", file.display()));
    // (entry name, code object) pairs: one for a code object, one per device entry for a bundle.
    let mut objects: Vec<(Option<String>, codeobject::CodeObject, &[u8])> = Vec::new();
    if bundle::is_bundle(&bytes) {
        for e in bundle::read(&bytes).map_err(bad)? {
            if e.range.is_empty() {
                continue;
            }
            let co = codeobject::read(&bytes[e.range.clone()]).map_err(|err| {
                Error::Usage(format!("{}: bundle entry {}: {err}", file.display(), e.id))
            })?;
            objects.push((Some(e.id), co, &bytes[e.range.clone()]));
        }
    } else {
        objects.push((None, codeobject::read(&bytes).map_err(bad)?, &bytes));
    }
    for (_, co, _) in &objects {
        check_sizes(file, co, sizes)?;
    }
    let mut out = String::new();
    if json {
        let mut list = Vec::new();
        for (entry, co, raw) in &objects {
            let mut v = inspect_json(entry.as_deref(), co, sizes);
            if loops {
                for (name, ls) in hot_loops::kernel_loops(raw, co).map_err(&read_code)? {
                    if let Some(kv) = v["kernels"]
                        .as_array_mut()
                        .and_then(|ks| ks.iter_mut().find(|k| k["name"] == name.as_str()))
                    {
                        kv["loops"] = serde_json::to_value(&ls).unwrap_or_default();
                    }
                }
            }
            list.push(v);
        }
        let v = if bundle::is_bundle(&bytes) {
            serde_json::json!({ "bundle": list })
        } else {
            list.into_iter().next().unwrap_or_default()
        };
        out = serde_json::to_string_pretty(&v).unwrap_or_default();
        out.push('\n');
    } else {
        for (entry, co, raw) in &objects {
            if let Some(e) = entry {
                out.push_str(&format!("bundle entry {e}\n"));
            }
            out.push_str(&inspect_text(file, co, sizes));
            if loops {
                for (name, ls) in hot_loops::kernel_loops(raw, co).map_err(&read_code)? {
                    out.push_str(&format!("kernel {name}: {} loops\n", ls.len()));
                    for l in &ls {
                        out.push_str(&hot_loops::render(l));
                    }
                }
            }
        }
    }
    std::io::stdout()
        .lock()
        .write_all(out.as_bytes())
        .map_err(io(Path::new("<stdout>")))
}

/// Sizes given to `--size` name sizes of the kernel's launch document, each
/// within its bounds.
fn check_sizes(
    file: &Path,
    co: &crate::linker::codeobject::CodeObject,
    sizes: &[(String, i64)],
) -> Result<(), Error> {
    if sizes.is_empty() {
        return Ok(());
    }
    let Some(l) = &co.launch else {
        return Err(Error::Usage(format!(
            "{}: --size needs rocmc's launch document, which this code object does not carry",
            file.display()
        )));
    };
    for (name, v) in sizes {
        let Some(s) = l.sizes.iter().find(|s| &s.name == name) else {
            let names: Vec<&str> = l.sizes.iter().map(|s| s.name.as_str()).collect();
            return Err(Error::Usage(format!(
                "{}: --size {name}={v}: the kernels have no size `{name}` (they have: {})",
                file.display(),
                names.join(", ")
            )));
        };
        if *v < 0 || (*v as u64) > s.max {
            return Err(Error::Usage(format!(
                "{}: --size {name}={v}: outside 0..={} (the kernel's bound)",
                file.display(),
                s.max
            )));
        }
    }
    Ok(())
}

/// Where LDS sized at launch is counted: at the given sizes, the others at
/// their bounds.
fn at_words(sizes: &[(String, i64)]) -> String {
    match sizes {
        [] => "at the size bounds".to_string(),
        s => {
            let given: Vec<String> = s.iter().map(|(n, v)| format!("{n}={v}")).collect();
            format!("at {}, other sizes at their bounds", given.join(", "))
        }
    }
}

fn inspect_json(
    entry: Option<&str>,
    co: &crate::linker::codeobject::CodeObject,
    sizes: &[(String, i64)],
) -> serde_json::Value {
    let mut v = serde_json::to_value(co).unwrap_or_default();
    if let Some(m) = v.as_object_mut() {
        m.insert("target_id".into(), co.target_id().into());
        if let Some(e) = entry {
            m.insert("bundle_entry".into(), e.into());
        }
        if let Some(l) = &co.launch {
            m.insert(
                "launch".into(),
                serde_json::from_str(&l.to_json()).unwrap_or_default(),
            );
        }
        if let Some(ks) = m.get_mut("kernels").and_then(|k| k.as_array_mut()) {
            for (kv, k) in ks.iter_mut().zip(&co.kernels) {
                let o = Occupancy::of(co, k, sizes);
                kv["lds_at_launch_bytes"] = o.launch_lds.into();
                kv["lds_at_launch_sizes"] = at_words(sizes).into();
                kv["occupancy_waves_per_simd"] = o.waves.into();
                kv["occupancy_limited_by"] = o.why.into();
            }
        }
    }
    v
}

fn inspect_text(
    file: &Path,
    co: &crate::linker::codeobject::CodeObject,
    sizes: &[(String, i64)],
) -> String {
    let mut out = format!(
        "{}: target {} (code object v{}, ELF ABI version {}, e_flags {:#x})\n",
        file.display(),
        co.target_id(),
        co.code_object_version,
        co.abi_version,
        co.e_flags
    );
    for k in &co.kernels {
        let o = Occupancy::of(co, k, sizes);
        let launch = match o.launch_lds {
            0 => String::new(),
            b => format!(" + {b} B at launch ({})", at_words(sizes)),
        };
        out.push_str(&format!(
            "kernel {}: kernarg {} B, LDS {} B{launch}, scratch {} B, VGPR {}, SGPR {}{}, spills {} VGPR / {} SGPR, wave{}, max work-group {}, occupancy {} waves/SIMD ({})\n",
            k.name,
            k.kernarg_segment_size,
            k.group_segment_fixed_size,
            k.private_segment_fixed_size,
            k.vgpr_count,
            k.sgpr_count,
            k.agpr_count.map(|a| format!(", AGPR {a}")).unwrap_or_default(),
            k.vgpr_spill_count,
            k.sgpr_spill_count,
            k.wavefront_size,
            k.max_flat_workgroup_size,
            o.waves,
            o.why
        ));
        for a in &k.args {
            out.push_str(&format!(
                "  arg {:<22} offset {:>3} size {:>2} {}{}\n",
                a.name.as_deref().unwrap_or("-"),
                a.offset,
                a.size,
                a.value_kind,
                a.address_space
                    .as_deref()
                    .map(|s| format!(" ({s})"))
                    .unwrap_or_default()
            ));
        }
    }
    if let Some(l) = &co.launch {
        out.push_str(&crate::launch_summary(l, "launch: "));
    }
    out
}

/// A kernel's waves per SIMD, counting the LDS it is launched with.
struct Occupancy {
    /// LDS sized at launch, at the given sizes and the largest the kernel
    /// accepts of the others.
    launch_lds: u64,
    /// The average over a CU's SIMDs (0.5: one 2-wave group per CU).
    waves: f64,
    why: &'static str,
}

impl Occupancy {
    fn of(
        co: &crate::linker::codeobject::CodeObject,
        k: &crate::linker::codeobject::KernelInfo,
        sizes: &[(String, i64)],
    ) -> Occupancy {
        use crate::linker::hw;
        // LDS a kernel is launched with grows with the sizes; the bounds
        // are the worst case the kernel admits.
        let launch_lds = co
            .launch
            .as_ref()
            .and_then(|l| {
                let mut at_max: std::collections::HashMap<String, i64> = l
                    .sizes
                    .iter()
                    .map(|s| (s.name.clone(), i64::try_from(s.max).unwrap_or(i64::MAX)))
                    .collect();
                at_max.extend(sizes.iter().cloned());
                let kl = l.kernels.iter().find(|kl| kl.name == k.name)?;
                kl.dynamic_shared_bytes.as_ref()?.eval(&at_max)
            })
            .map_or(0, |b| b.max(0) as u64);
        let mut u = hw::Usage::of(k);
        u.lds_bytes = u
            .lds_bytes
            .saturating_add(u32::try_from(launch_lds).unwrap_or(u32::MAX));
        let target = co.target_id();
        let (waves, why) = hw::occupancy_exact(
            &hw::hardware(target.split(':').next().unwrap_or_default()),
            &u,
        );
        Occupancy {
            launch_lds,
            waves,
            why,
        }
    }
}
