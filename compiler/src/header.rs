//! `--emit header`: a C header for a built module, so that its kernels can
//! be called from C, C++, Python (ctypes, cffi) or any FFI without reading
//! LLVM IR. It is written from the launch document stored in the module
//! ([`LaunchInfo`]), the same facts the runtimes check launches against.
//!
//! For every kernel, in launch order: the arguments in order with their C
//! types and shapes, the work-group size, the grid as C functions of the
//! sizes (exactly [`Extent::eval`]'s floor semantics), and
//! - for GPU targets, a struct laid out as the kernel's argument block
//!   (pass its fields, in order, as `kernelParams` to `hipModuleLaunchKernel`
//!   or `cuLaunchKernel`);
//! - for the CPU target, the shared object's entry point and a typed
//!   wrapper that runs the whole grid on the calling thread.

use rocmc_codegen::Target;
use rocmc_linker::launch::{ArgRole, Extent, KernelLaunch, LaunchArg, LaunchInfo};
use std::fmt::Write;

/// The C type of a buffer element or a scalar of dtype `d`. numpy-less
/// types (f16, bf16, 8-bit floats) travel as their bits.
fn c_type(d: &str) -> &'static str {
    match d {
        "f32" => "float",
        "f64" => "double",
        "f16" | "bf16" => "uint16_t",
        "i8" => "int8_t",
        "u8" | "bool" | "f8e4m3" | "f8e5m2" => "uint8_t",
        "i32" => "int32_t",
        "u32" => "uint32_t",
        "i64" => "int64_t",
        _ => "uint8_t",
    }
}

/// A C expression of `e`, sizes as `int64_t` parameters of that name.
fn c_expr(e: &Extent) -> String {
    let bin = |f: &str, a: &Extent, b: &Extent| format!("{f}({}, {})", c_expr(a), c_expr(b));
    match e {
        Extent::Const(v) => format!("INT64_C({v})"),
        Extent::Size(s) => s.clone(),
        Extent::Add(a, b) => format!("({} + {})", c_expr(a), c_expr(b)),
        Extent::Sub(a, b) => format!("({} - {})", c_expr(a), c_expr(b)),
        Extent::Mul(a, b) => format!("({} * {})", c_expr(a), c_expr(b)),
        Extent::Div(a, b) => bin("rocmc_floordiv", a, b),
        Extent::CeilDiv(a, b) => bin("rocmc_ceildiv", a, b),
        Extent::Mod(a, b) => bin("rocmc_mod", a, b),
        Extent::Min(a, b) => bin("rocmc_min", a, b),
        Extent::Max(a, b) => bin("rocmc_max", a, b),
        Extent::Xor(a, b) => format!("({} ^ {})", c_expr(a), c_expr(b)),
    }
}

/// [`c_expr`] with products and sums saturating at `INT64_MAX`, for
/// comparing a count of sizes that may pass 64 bits with its bound.
fn c_expr_sat(e: &Extent) -> String {
    let bin =
        |f: &str, a: &Extent, b: &Extent| format!("{f}({}, {})", c_expr_sat(a), c_expr_sat(b));
    match e {
        Extent::Add(a, b) => bin("rocmc_satadd", a, b),
        Extent::Mul(a, b) => bin("rocmc_satmul", a, b),
        Extent::Div(a, b) => bin("rocmc_floordiv", a, b),
        Extent::CeilDiv(a, b) => bin("rocmc_ceildiv", a, b),
        Extent::Mod(a, b) => bin("rocmc_mod", a, b),
        Extent::Min(a, b) => bin("rocmc_min", a, b),
        Extent::Max(a, b) => bin("rocmc_max", a, b),
        e => c_expr(e),
    }
}

fn uses_size(e: &Extent, name: &str) -> bool {
    match e {
        Extent::Const(_) => false,
        Extent::Size(s) => s == name,
        Extent::Add(a, b)
        | Extent::Sub(a, b)
        | Extent::Mul(a, b)
        | Extent::Div(a, b)
        | Extent::CeilDiv(a, b)
        | Extent::Mod(a, b)
        | Extent::Min(a, b)
        | Extent::Max(a, b)
        | Extent::Xor(a, b) => uses_size(a, name) || uses_size(b, name),
    }
}

/// `X: const float *, [rows][cols]` for the comment listing the arguments.
fn arg_line(a: &LaunchArg) -> String {
    match a.role {
        ArgRole::Buffer => {
            let shape: Vec<String> = a.shape.iter().map(shape_text).collect();
            format!(
                "{}: {}{} * ({}[{}]{})",
                a.name,
                if a.written { "" } else { "const " },
                c_type(&a.dtype),
                a.dtype,
                shape.join("]["),
                if a.written { ", written" } else { "" }
            )
        }
        ArgRole::Size => format!("{}: int32_t (size)", a.name),
        ArgRole::Scalar => format!("{}: {} ({})", a.name, c_type(&a.dtype), a.dtype),
    }
}

fn shape_text(e: &Extent) -> String {
    match e {
        Extent::Const(v) => v.to_string(),
        Extent::Size(s) => s.clone(),
        other => c_expr(other),
    }
}

/// The sizes a kernel's grid depends on, as C parameters in size order.
fn size_params(l: &LaunchInfo) -> String {
    if l.sizes.is_empty() {
        return "void".into();
    }
    l.sizes
        .iter()
        .map(|s| format!("int64_t {}", s.name))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The C parameter list of a typed call: buffers, sizes, scalars in order.
fn typed_params(k: &KernelLaunch) -> String {
    k.args.iter().map(c_decl).collect::<Vec<_>>().join(", ")
}

/// An argument as a C declaration: `const float *X`, `int32_t n`.
fn c_decl(a: &LaunchArg) -> String {
    match a.role {
        ArgRole::Buffer => format!(
            "{}{} *{}",
            if a.written { "" } else { "const " },
            c_type(&a.dtype),
            a.name
        ),
        ArgRole::Size => format!("int32_t {}", a.name),
        ArgRole::Scalar => format!("{} {}", c_type(&a.dtype), a.name),
    }
}

/// The C header for the module `l` built for `target`.
pub fn c_header(module: &str, target: &Target, l: &LaunchInfo) -> String {
    let guard = format!("ROCMC_{}_H", module.to_uppercase());
    let up = module.to_uppercase();
    let mut h = String::new();
    let w = &mut h;
    // Writing into a String cannot fail.
    let _ = writeln!(
        w,
        "/* {module}: kernels built by rocmc {} for {target}. Generated: do not edit. */",
        env!("CARGO_PKG_VERSION")
    );
    let _ = writeln!(w, "#ifndef {guard}\n#define {guard}\n");
    let _ = writeln!(w, "#include <stdint.h>\n#include <string.h>\n");
    let _ = writeln!(w, "#ifdef __cplusplus\nextern \"C\" {{\n#endif\n");
    let _ = writeln!(
        w,
        "/* Sizes: each in 0..=MAX, and a multiple of DIVISOR (launches that break\n   either are refused by rocmc's runtimes; the code relies on them). */"
    );
    for s in &l.sizes {
        let n = s.name.to_uppercase();
        let _ = writeln!(w, "#define {up}_{n}_MAX INT64_C({})", s.max);
        let _ = writeln!(w, "#define {up}_{n}_DIVISOR INT64_C({})", s.divisor.max(1));
    }
    let _ = writeln!(
        w,
        "\n/* Index arithmetic of launch geometry: floor division and modulo, as rocmc. */"
    );
    for (name, body) in [
        (
            "rocmc_floordiv",
            "int64_t q = a / b; return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;",
        ),
        ("rocmc_ceildiv", "return -rocmc_floordiv(-a, b);"),
        (
            "rocmc_mod",
            "int64_t r = a % b; return r < 0 ? r + (b < 0 ? -b : b) : r;",
        ),
        ("rocmc_min", "return a < b ? a : b;"),
        ("rocmc_max", "return a > b ? a : b;"),
        // Of non-negative sizes (the run checks them first).
        (
            "rocmc_satmul",
            "return a != 0 && b > INT64_MAX / a ? INT64_MAX : a * b;",
        ),
        (
            "rocmc_satadd",
            "return b > INT64_MAX - a ? INT64_MAX : a + b;",
        ),
    ] {
        let _ = writeln!(
            w,
            "#ifndef ROCMC_{0}\n#define ROCMC_{0}\nstatic inline int64_t {1}(int64_t a, int64_t b) {{ {body} }}\n#endif",
            name.trim_start_matches("rocmc_").to_uppercase(),
            name
        );
    }
    // A shared object's kernels are host functions a C program calls directly.
    let cpu =
        crate::toolchain::lookup(target).module_output() == crate::toolchain::Output::SharedObject;
    for k in &l.kernels {
        kernel_section(w, l, k, cpu);
    }
    let _ = writeln!(w, "#ifdef __cplusplus\n}}\n#endif\n\n#endif /* {guard} */");
    h
}

fn kernel_section(w: &mut String, l: &LaunchInfo, k: &KernelLaunch, cpu: bool) {
    let name = &k.name;
    let up = name.to_uppercase();
    let _ = writeln!(w, "\n/* Kernel `{name}`. Arguments, in order:");
    for a in &k.args {
        let _ = writeln!(w, " *   {}", arg_line(a));
    }
    let _ = writeln!(
        w,
        " * Work-group ({}, {}, {}); grid ({}, {}, {}). */",
        k.block[0], k.block[1], k.block[2], k.grid_text[0], k.grid_text[1], k.grid_text[2]
    );
    for (d, axis) in ["X", "Y", "Z"].iter().enumerate() {
        let _ = writeln!(w, "#define {up}_BLOCK_{axis} {}", k.block[d]);
    }
    if k.dynamic_shared > 0 {
        let _ = writeln!(w, "#define {up}_DYNAMIC_SHARED_BYTES {}", k.dynamic_shared);
    }
    let params = size_params(l);
    for (d, axis) in ["x", "y", "z"].iter().enumerate() {
        let body = c_expr(&k.grid[d]);
        // Every size is a parameter; those the expression leaves out are
        // marked used, for -Wunused-parameter.
        let unused: String = l
            .sizes
            .iter()
            .filter(|s| !uses_size(&k.grid[d], &s.name))
            .map(|s| format!("(void){}; ", s.name))
            .collect();
        let _ = writeln!(
            w,
            "static inline int64_t {name}_grid_{axis}({params}) {{ {unused}return {body}; }}"
        );
    }
    if let (Some(e), false) = (&k.dynamic_shared_bytes, cpu) {
        let unused: String = l
            .sizes
            .iter()
            .filter(|s| !uses_size(e, &s.name))
            .map(|s| format!("(void){}; ", s.name))
            .collect();
        let _ = writeln!(
            w,
            "/* LDS sized at launch: pass this as sharedMemBytes of hipModuleLaunchKernel / cuLaunchKernel. */\nstatic inline int64_t {name}_shared_bytes({params}) {{ {unused}return {}; }}",
            c_expr(e)
        );
    }
    requirements(w, l, k);
    if cpu {
        cpu_entry(w, l, k);
    } else {
        gpu_args(w, k);
    }
}

/// `NAME_fits(sizes)`: whether the launch requirements hold (a fused loop
/// of sizes without `max` counts in 32 bits; the runtimes refuse a launch
/// where they do not, and a program launching through HIP or CUDA itself
/// checks them with this).
fn requirements(w: &mut String, l: &LaunchInfo, k: &KernelLaunch) {
    let name = &k.name;
    let params = size_params(l);
    let unused: String = l
        .sizes
        .iter()
        .filter(|s| !k.requires.iter().any(|r| uses_size(&r.extent, &s.name)))
        .map(|s| format!("(void){}; ", s.name))
        .collect();
    let _ = writeln!(
        w,
        "/* Whether these sizes keep each fused loop within the 32-bit counter it was\n   compiled with (1) or not (0):"
    );
    for r in &k.requires {
        let _ = writeln!(w, "     {} <= {} ({}),", r.text, r.max, r.what);
    }
    let checks: Vec<String> = k
        .requires
        .iter()
        .map(|r| format!("{} <= INT64_C({})", c_expr_sat(&r.extent), r.max))
        .collect();
    let body = match checks.is_empty() {
        true => "1".to_string(),
        false => checks.join(" && "),
    };
    let _ = writeln!(
        w,
        "   nothing where the kernel has no such loop. */\nstatic inline int {name}_fits({params}) {{ {unused}return {body}; }}"
    );
}

/// The GPU argument block: the kernel's parameters in order, each at its
/// natural alignment (pointers 8 bytes, sizes 4), as both ABIs lay them out.
fn gpu_args(w: &mut String, k: &KernelLaunch) {
    let _ = writeln!(
        w,
        "/* The argument block of `{0}`: pass &args.FIELD for each field, in order, as\n   kernelParams of hipModuleLaunchKernel / cuLaunchKernel. */\nstruct {0}_args {{",
        k.name
    );
    for a in &k.args {
        let _ = writeln!(w, "  {};", c_decl(a));
    }
    if !k.tensor_maps.is_empty() {
        let _ = writeln!(
            w,
            "  /* Device memory holding {} CUtensorMap(s), 128 bytes each, 64-byte aligned, in order:",
            k.tensor_maps.len()
        );
        for m in &k.tensor_maps {
            let a = &k.args[m.arg];
            let boxed: Vec<String> = m.boxed.iter().rev().map(|b| b.to_string()).collect();
            let _ = writeln!(
                w,
                "     `{}`: dense row-major, boxDim {{{}}} (innermost first), CU_TENSOR_MAP_SWIZZLE_{}B,",
                a.name,
                boxed.join(", "),
                m.swizzle
            );
        }
        let _ = writeln!(
            w,
            "     each encoded by cuTensorMapEncodeTiled with an unsigned data type of the\n     element's size and zero fill. */\n  const void *tensor_maps;"
        );
    }
    let _ = writeln!(w, "}};");
}

/// The CPU shared object's symbol and a typed wrapper over it.
fn cpu_entry(w: &mut String, l: &LaunchInfo, k: &KernelLaunch) {
    let name = &k.name;
    let _ = writeln!(
        w,
        "/* The shared object's entry: buffers and sizes in argument order, each scalar\n   in an 8-byte slot; runs work-groups first_group.. (linear, x fastest), at most\n   group_count of them. Work-groups are independent: threads may split the grid. */\nvoid {name}(void *const *buffers, const int32_t *sizes, const uint8_t *params,\n    int64_t first_group, int64_t group_count);"
    );
    let _ = writeln!(
        w,
        "/* Runs the whole grid of `{name}` on the calling thread. Returns 0, or -1 without\n   running where a size is outside 0..=MAX or not a multiple of its DIVISOR, or the\n   sizes break a launch requirement ({name}_fits). */\nstatic inline int {name}_run({}) {{",
        typed_params(k)
    );
    for a in k.args.iter().filter(|a| a.role == ArgRole::Size) {
        if let Some(s) = l.sizes.iter().find(|s| s.name == a.name) {
            let multiple = match s.divisor {
                0 | 1 => String::new(),
                d => format!(" || {} % {d} != 0", a.name),
            };
            let _ = writeln!(
                w,
                "  if ({0} < 0 || (int64_t){0} > INT64_C({1}){multiple}) return -1;",
                a.name, s.max
            );
        }
    }
    let bufs: Vec<String> = k
        .args
        .iter()
        .filter(|a| a.role == ArgRole::Buffer)
        .map(|a| format!("(void *){}", a.name))
        .collect();
    let sizes: Vec<&str> = k
        .args
        .iter()
        .filter(|a| a.role == ArgRole::Size)
        .map(|a| a.name.as_str())
        .collect();
    // The grid and `_fits` functions take every size of the module, in size order.
    let all: Vec<String> = l
        .sizes
        .iter()
        .map(|s| match sizes.contains(&s.name.as_str()) {
            true => format!("(int64_t){}", s.name),
            false => "0".into(),
        })
        .collect();
    if !k.requires.is_empty() {
        let _ = writeln!(w, "  if (!{name}_fits({})) return -1;", all.join(", "));
    }
    let scalars: Vec<&LaunchArg> = k
        .args
        .iter()
        .filter(|a| a.role == ArgRole::Scalar)
        .collect();
    // Empty tables still get one entry: every pointer handed over is valid.
    let _ = writeln!(
        w,
        "  void *buffers[] = {{{}NULL}};",
        bufs.iter().map(|b| format!("{b}, ")).collect::<String>()
    );
    let _ = writeln!(
        w,
        "  const int32_t sizes[] = {{{}0}};",
        sizes.iter().map(|s| format!("{s}, ")).collect::<String>()
    );
    let _ = writeln!(w, "  uint8_t params[8 * {}] = {{0}};", scalars.len() + 1);
    for (i, a) in scalars.iter().enumerate() {
        let _ = writeln!(w, "  memcpy(params + 8 * {i}, &{0}, sizeof {0});", a.name);
    }
    let _ = writeln!(
        w,
        "  int64_t groups = {name}_grid_x({0}) * {name}_grid_y({0}) * {name}_grid_z({0});",
        all.join(", ")
    );
    let _ = writeln!(
        w,
        "  if (groups > 0) {name}(buffers, sizes, params, 0, groups);\n  return 0;\n}}"
    );
}
