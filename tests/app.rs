//! Kernels shipped through a build script: rocmc::Build, the generated
//! typed launchers, and examples/vadd-app.

use crate::common::*;
use std::process::Command;

#[test]
fn the_example_app_builds_and_fails_clearly_without_a_gpu() {
    let exe = workspace_bin("vadd-app");
    let run = Command::new(&exe).output().unwrap();
    assert_eq!(run.status.code(), Some(1));
    assert!(
        text(&run.stderr).starts_with("vadd-app: no AMD GPU visible"),
        "{}",
        text(&run.stderr)
    );
    // The same kernels for NVIDIA, through the CUDA driver, which is not here either.
    let run = Command::new(&exe)
        .arg("cuda")
        .env("ROCMC_CUDA_LIBRARY", root().join("no-such-libcuda.so.1"))
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(1));
    assert!(
        text(&run.stderr).starts_with("vadd-app: CUDA driver not found"),
        "{}",
        text(&run.stderr)
    );
    // The build script declared its inputs and the override variable to Cargo.
    let outputs: Vec<String> = std::fs::read_dir(root().join("target/debug/build"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("vadd-app-"))
        .filter_map(|e| std::fs::read_to_string(e.path().join("output")).ok())
        .collect();
    let o = outputs
        .iter()
        .find(|o| o.contains("rerun-if"))
        .expect("the build script's output");
    for line in [
        "cargo:rerun-if-changed=../vadd.toml",
        "cargo:rerun-if-changed=../saxpy.toml",
        "cargo:rerun-if-env-changed=ROCMC_MCPU",
    ] {
        assert!(o.contains(line), "{line}\n{o}");
    }
    // The application binary links no LLVM: it can be copied to a GPU machine without one.
    let ldd = Command::new("ldd").arg(&exe).output().unwrap();
    assert!(
        !text(&ldd.stdout).contains("libLLVM"),
        "{}",
        text(&ldd.stdout)
    );
}

#[test]
fn build_writes_bundles_and_launchers_and_reports_kernel_errors() {
    let d = tempfile::tempdir().unwrap();
    // softmax as three kernels: the example without its compute_at steps.
    let unfused = d.path().join("softmax3.toml");
    std::fs::write(
        &unfused,
        std::fs::read_to_string(example("softmax"))
            .unwrap()
            .replace("name = \"softmax\"", "name = \"softmax3\"")
            .replace("\"compute_at(Y, r)\", ", "\"bind(r, blockIdx.x)\", "),
    )
    .unwrap();
    let out = rocmc::Build::new()
        .kernel(example("vadd"))
        .kernel(example("softmax"))
        .kernel(&unfused)
        .mcpu("gfx90a")
        .mcpu("gfx942")
        .out_dir(d.path())
        .cargo_metadata(false)
        .try_compile()
        .unwrap();
    assert_eq!(out.bundles.len(), 3);
    let list = tool(
        "clang-offload-bundler-22",
        &[
            "--list",
            "--type=o",
            &format!("--input={}", out.bundles[1].display()),
        ],
    );
    assert!(
        list.contains("hipv4-amdgcn-amd-amdhsa--gfx90a")
            && list.contains("hipv4-amdgcn-amd-amdhsa--gfx942"),
        "{list}"
    );
    let src = std::fs::read_to_string(&out.launchers).unwrap();
    assert!(
        src.contains("pub mod vadd") && src.contains("pub struct Softmax"),
        "{src}"
    );
    // softmax3: three stage kernels launched in order, typed buffers for every tensor.
    let m = src.find("softmax3_M").unwrap();
    let s = src.find("softmax3_S").unwrap();
    let y = src.find("softmax3_Y").unwrap();
    assert!(m < s && s < y);
    assert!(src.contains("X: &rocmc_runtime_hip::DeviceBuffer<f32>, M: &rocmc_runtime_hip::DeviceBuffer<f32>, S: &rocmc_runtime_hip::DeviceBuffer<f32>, Y: &rocmc_runtime_hip::DeviceBuffer<f32>, rows: i32, cols: i32"), "{src}");
    // softmax: one kernel; M and S live in LDS and are no arguments.
    assert!(
        !src.contains("softmax_M") && !src.contains("softmax_S"),
        "{src}"
    );
    assert!(src.contains("X: &rocmc_runtime_hip::DeviceBuffer<f32>, Y: &rocmc_runtime_hip::DeviceBuffer<f32>, rows: i32, cols: i32"), "{src}");

    let bad = d.path().join("bad.toml");
    std::fs::write(
        &bad,
        std::fs::read_to_string(example("vadd"))
            .unwrap()
            .replace("A[i] + B[i]", "A[i] + Bq[i]"),
    )
    .unwrap();
    let e = refusal(rocmc::Build::new().kernel(&bad).mcpu("gfx90a"));
    assert!(
        e.contains("bad.toml:") && e.contains("unknown tensor `Bq`"),
        "{e}"
    );
    let panic = std::panic::catch_unwind(|| {
        rocmc::Build::new()
            .kernel(&bad)
            .mcpu("gfx90a")
            .out_dir(d.path())
            .cargo_metadata(false)
            .compile();
    })
    .unwrap_err();
    let msg = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        msg.contains("unknown tensor `Bq`") && msg.contains("^^"),
        "{msg}"
    );
    let e = refusal(rocmc::Build::new().kernel(example("vadd")));
    assert!(e.contains("no target") && e.contains("ROCMC_MCPU"), "{e}");
    let e = refusal(
        rocmc::Build::new()
            .kernel(example("vadd"))
            .mcpu("gfx90a")
            .mcpu("sm_90"),
    );
    assert!(
        e.contains("mix AMD and NVIDIA") && e.contains(".any_device()"),
        "{e}"
    );
}

/// `any_device()`: one launcher per kernel file over the one device
/// interface, embedding an AMD bundle (wave64 and wave32 targets with
/// their own blocks: the unscheduled GEMM gets matrix instructions),
/// PTX per NVIDIA target and the CPU's shared object.
#[test]
fn any_device_launchers_embed_every_vendors_code() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc::Build::new()
        .any_device()
        .kernel(example("vadd").with_file_name("gpt2/kernels/linear.toml"))
        .mcpu("gfx90a")
        .mcpu("sm_90")
        .mcpu("gfx1100")
        .mcpu("x86-64")
        .out_dir(d.path())
        .cargo_metadata(false)
        .try_compile()
        .unwrap();
    let names = file_names(&out);
    assert_eq!(
        names,
        ["linear.hipfb", "linear.sm_90.ptx", "linear.x86-64.so"]
    );
    // The bundle holds both AMD targets, each with its own block (wave64
    // and wave32), which one Build per vendor refuses.
    let bundle = std::fs::read(&out.bundles[0]).unwrap();
    let entries = rocmc::linker::bundle::read(&bundle).unwrap();
    let blocks: Vec<_> = entries
        .iter()
        .filter(|e| e.target_id().is_some())
        .map(|e| {
            let co = rocmc::linker::codeobject::read(&bundle[e.range.clone()]).unwrap();
            co.launch.unwrap().kernels[0].block
        })
        .collect();
    assert_eq!(blocks.len(), 2);
    assert_ne!(blocks[0], blocks[1]);
    let src = std::fs::read_to_string(&out.launchers).unwrap();
    for want in [
        "pub const CODE: rocmc_device::Code",
        "amd: Some(include_bytes!(",
        "(\"sm_90\", include_str!(",
        "(\"x86-64\", include_bytes!(",
        "pub fn load(device: &mut dyn rocmc_device::Device)",
        "X: &rocmc_device::Tensor<rocmc_device::f16>, W: &rocmc_device::Tensor<rocmc_device::f16>, b: &rocmc_device::Tensor<rocmc_device::f16>, Y: &rocmc_device::Tensor<rocmc_device::f16>, M: i32, N: i32, K: i32",
        "device.launch(&self.module, \"linear\", &[X.arg(), W.arg(), b.arg(), Y.arg(), rocmc_device::Arg::Size(M)",
    ] {
        assert!(src.contains(want), "`{want}` not in:\n{src}");
    }
    assert!(
        !src.contains("rocmc_runtime_hip") && !src.contains("rocmc_runtime_cuda"),
        "{src}"
    );
}

/// NVIDIA targets: one PTX file per target, checked by ptxas, and
/// launchers over rocmc-runtime-cuda that embed them all.
#[test]
fn build_writes_ptx_and_cuda_launchers_for_nvidia_targets() {
    let d = tempfile::tempdir().unwrap();
    let out = rocmc::Build::new()
        .kernel(example("vadd"))
        .kernel(example("softmax"))
        .mcpu("sm_80")
        .mcpu("h100")
        .out_dir(d.path())
        .cargo_metadata(false)
        .try_compile()
        .unwrap();
    let names = file_names(&out);
    assert_eq!(
        names,
        [
            "vadd.sm_80.ptx",
            "vadd.sm_90.ptx",
            "softmax.sm_80.ptx",
            "softmax.sm_90.ptx"
        ]
    );
    for (p, arch) in out.bundles.iter().zip(["sm_80", "sm_90", "sm_80", "sm_90"]) {
        assemble_ptx(&std::fs::read_to_string(p).unwrap(), arch).unwrap();
    }
    let src = std::fs::read_to_string(&out.launchers).unwrap();
    assert!(src.contains("device.load_best_ptx(PTX)?"), "{src}");
    assert!(
        src.contains("vadd.sm_80.ptx") && src.contains("vadd.sm_90.ptx"),
        "{src}"
    );
    assert!(src.contains("X: &rocmc_runtime_cuda::DeviceBuffer<f32>, Y: &rocmc_runtime_cuda::DeviceBuffer<f32>, rows: i32, cols: i32"), "{src}");
    assert!(!src.contains("rocmc_runtime_hip"), "{src}");
}

/// A buffer of the wrong element type is a compile error in the
/// application, not a launch failure.
#[test]
fn a_wrongly_typed_buffer_does_not_compile() {
    let d = tempfile::tempdir().unwrap();
    let app = d.path().join("app");
    std::fs::create_dir_all(app.join("src")).unwrap();
    let r = root();
    // The launchers as a build script writes them (rocmc::Build, here in
    // the test), included by an application that depends on the runtime
    // alone: checking it compiles no compiler (the build script's path is
    // the_example_app_builds_and_fails_clearly_without_a_gpu's).
    std::fs::write(
        app.join("Cargo.toml"),
        format!(
            "[package]\nname = \"typed-app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n\n[dependencies]\nrocmc-runtime-hip = {{ path = {:?} }}\n",
            r.join("runtime-hip"),
        ),
    )
    .unwrap();
    // A half-precision kernel too: f16 buffers and an f16 parameter.
    let hsaxpy = d.path().join("hsaxpy.toml");
    std::fs::write(
        &hsaxpy,
        "[kernel]\nname = \"hsaxpy\"\nsizes = [\"n\"]\n[inputs]\nX = { dtype = \"f16\", shape = [\"n\"] }\n[params]\nalpha = \"f16\"\n[[stage]]\ncompute = \"Y[i] = alpha * X[i]\"\nshape = [\"n\"]\nschedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n",
    )
    .unwrap();
    // And bool: a mask buffer and a bool parameter.
    let masked = d.path().join("masked.toml");
    std::fs::write(
        &masked,
        "[kernel]\nname = \"masked\"\nsizes = [\"n\"]\n[inputs]\nX = { dtype = \"f32\", shape = [\"n\"] }\nM = { dtype = \"bool\", shape = [\"n\"] }\n[params]\ninvert = \"bool\"\n[[stage]]\ncompute = \"Y[i] = select(M[i] != invert, X[i], 0.0)\"\nshape = [\"n\"]\nschedule = [\"bx, tx = split(i, 64)\", \"bind(bx, blockIdx.x)\", \"bind(tx, threadIdx.x)\"]\n",
    )
    .unwrap();
    let out = rocmc::Build::new()
        .kernel(example("vadd"))
        .kernel(&hsaxpy)
        .kernel(&masked)
        .mcpu("gfx90a")
        .out_dir(d.path())
        .cargo_metadata(false)
        .try_compile()
        .unwrap();
    let main = |ty: &str| {
        format!(
            "include!({:?});\nfn main() -> rocmc_runtime_hip::Result<()> {{\n    let dev = rocmc_runtime_hip::Hip::load()?.device(\"amdgpu\")?;\n    let a = dev.alloc::<f32>(8)?;\n    let c = dev.alloc::<{ty}>(8)?;\n    vadd::Vadd::load(&dev)?.launch(&a, &a, &c, 8)?;\n    let h = dev.alloc::<rocmc_runtime_hip::f16>(8)?;\n    hsaxpy::Hsaxpy::load(&dev)?.launch(&h, &h, 8, rocmc_runtime_hip::f16::from_f32(2.0))?;\n    let m = dev.alloc::<rocmc_runtime_hip::Bool8>(8)?;\n    masked::Masked::load(&dev)?.launch(&a, &m, &a, 8, true.into())\n}}\n",
            out.launchers
        )
    };
    std::fs::write(app.join("src/main.rs"), main("f64")).unwrap();
    // The workspace's target folder and lock file: the runtime's
    // dependencies at the workspace's versions, checked once.
    std::fs::copy(r.join("Cargo.lock"), app.join("Cargo.lock")).unwrap();
    let check = || {
        cargo()
            .args(["check", "-q", "--offline"])
            .env("CARGO_TARGET_DIR", r.join("target"))
            .current_dir(&app)
            .output()
            .unwrap()
    };
    let out = check();
    assert!(
        !out.status.success(),
        "an f64 buffer was accepted where f32 is required"
    );
    assert!(
        text(&out.stderr).contains("expected `&DeviceBuffer<f32>`, found `&DeviceBuffer<f64>`"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(app.join("src/main.rs"), main("f32")).unwrap();
    let out = check();
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// `kernel_tuned`: knobs of a default schedule given by hand, as
/// `rocmc build --tune`; a value that is not a candidate is refused.
#[test]
fn kernel_tuned_builds_the_given_knobs_and_refuses_bad_ones() {
    let linear = example("vadd").with_file_name("gpt2/kernels/linear.toml");
    let ptx = |tune: Option<&str>| {
        let d = tempfile::tempdir().unwrap();
        let mut b = rocmc::Build::new();
        match tune {
            Some(t) => b.kernel_tuned(&linear, t),
            None => b.kernel(&linear),
        };
        let out = b
            .mcpu("sm_90")
            .out_dir(d.path())
            .cargo_metadata(false)
            .try_compile()
            .map_err(|e| e.to_string())?;
        Ok::<String, String>(std::fs::read_to_string(&out.bundles[0]).unwrap())
    };
    let default = ptx(None).unwrap();
    let tuned = ptx(Some("Y_BM=64,Y_BN=128")).unwrap();
    assert_ne!(default, tuned);
    // A 64 x 128 tile per work-group of 2 x 4 warps: 8 warps still, smaller tiles in LDS.
    assert!(
        tuned.contains(".reqntid 32, 4, 2") || tuned.contains(".maxntid 32, 4, 2"),
        "{}",
        &tuned[..2000]
    );
    let e = ptx(Some("Y_BN=100")).unwrap_err();
    assert!(e.contains("Y_BN") && e.contains("64, 128, 256"), "{e}");
}

#[test]
fn kernel_tuned_on_gives_one_target_its_own_knobs() {
    let linear = example("vadd").with_file_name("gpt2/kernels/linear.toml");
    let build = |on: Option<&str>, mcpus: &[&str]| {
        let d = tempfile::tempdir().unwrap();
        let mut b = rocmc::Build::new();
        b.kernel_tuned(&linear, "Y_BN=128");
        if let Some(t) = on {
            // Only the NVIDIA matrix rule has stages.
            b.kernel_tuned_on(&linear, t, "Y_BN=128,Y_STAGES=3");
        }
        for m in mcpus {
            b.mcpu(m);
        }
        let out = b
            .any_device()
            .out_dir(d.path())
            .cargo_metadata(false)
            .try_compile()
            .map_err(|e| e.to_string())?;
        let texts: Vec<(String, String)> = out
            .bundles
            .iter()
            .filter(|p| p.extension().is_some_and(|e| e == "ptx"))
            .map(|p| {
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                (name, std::fs::read_to_string(p).unwrap())
            })
            .collect();
        Ok::<_, String>((file_names(&out), texts))
    };
    // Everywhere, the stages are refused by the CPU's rule, which names its knobs.
    let e = refusal(
        rocmc::Build::new()
            .kernel_tuned(&linear, "Y_STAGES=3")
            .mcpu("x86-64")
            .any_device(),
    );
    assert!(e.contains("Y_STAGES") && e.contains("Y_BK"), "{e}");
    // A vendor launcher has one launch shape: values for one of its
    // targets need `any_device`.
    let e = refusal(
        rocmc::Build::new()
            .kernel_tuned_on(&linear, "sm_90", "Y_BN=128")
            .mcpu("sm_80")
            .mcpu("sm_90"),
    );
    assert!(
        e.contains("any_device") && e.contains("sm_80, sm_90"),
        "{e}"
    );
    // On sm_90 alone they build, and change only sm_90's code.
    let (files, base) = build(None, &["sm_80", "sm_90", "x86-64"]).unwrap();
    let (files_on, on) = build(Some("sm_90"), &["sm_80", "sm_90", "x86-64"]).unwrap();
    assert_eq!(files, files_on);
    assert_eq!(base.len(), 2);
    for ((name, a), (_, b)) in base.iter().zip(&on) {
        assert_eq!(a == b, name.contains("sm_80"), "{name}");
    }
}

/// What a build that must fail says, writing into a fresh folder.
fn refusal(b: &mut rocmc::Build) -> String {
    let d = tempfile::tempdir().unwrap();
    b.out_dir(d.path())
        .cargo_metadata(false)
        .try_compile()
        .unwrap_err()
        .to_string()
}

/// The file names of what a build wrote, in order.
fn file_names(out: &rocmc::build::Outputs) -> Vec<String> {
    out.bundles
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}
