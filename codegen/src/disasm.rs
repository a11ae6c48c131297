//! AMDGPU machine code back to instructions, through LLVM's own MC
//! disassembler (LLVM-C's `LLVMDisasmInstruction`): what `rocmc inspect
//! --loops` reads a code object's kernels with, whoever compiled them.

use inkwell::llvm_sys::disassembler::{
    LLVMCreateDisasmCPU, LLVMDisasmDispose, LLVMDisasmInstruction,
};
use inkwell::targets::{InitializationConfig, Target as LlvmTarget};
use std::ffi::{CStr, CString};

/// One instruction of a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Its address in the code object.
    pub addr: u64,
    /// Its length in bytes.
    pub size: u32,
    /// Its assembly, as `llvm-objdump` prints it (`s_waitcnt vmcnt(0)`).
    pub text: String,
    /// Where it branches to, for a branch (`s_branch`, `s_cbranch_*`).
    pub target: Option<u64>,
}

impl Insn {
    /// The instruction's name (`v_mfma_f32_16x16x16_f16`).
    pub fn mnemonic(&self) -> &str {
        self.text.split_whitespace().next().unwrap_or("")
    }
}

/// `code`, loaded at `addr`, disassembled for processor `cpu` (`gfx942`).
/// Bytes that decode to no instruction for the processor are an error
/// naming their address.
pub fn disassemble_amdgpu(cpu: &str, code: &[u8], addr: u64) -> Result<Vec<Insn>, String> {
    // LLVM aborts the process on a processor it cannot disassemble for.
    if rocmc_target::amdgpu::processor_info(cpu).is_none() {
        return Err(format!("`{cpu}` is not an AMDGPU processor LLVM knows"));
    }
    static INIT: std::sync::Once = std::sync::Once::new();
    extern "C" {
        // In LLVM's AMDGPUDisassembler library; inkwell does not call it.
        fn LLVMInitializeAMDGPUDisassembler();
    }
    INIT.call_once(|| {
        LlvmTarget::initialize_amd_gpu(&InitializationConfig::default());
        // SAFETY: registers the disassembler with LLVM's target registry, once.
        unsafe { LLVMInitializeAMDGPUDisassembler() };
    });
    let triple = CString::new("amdgcn-amd-amdhsa").expect("no NUL");
    let cpu_c = CString::new(cpu).map_err(|_| format!("processor name {cpu:?} has a NUL"))?;
    // SAFETY: both strings outlive the call; no callbacks or user data are passed.
    let dc = unsafe {
        LLVMCreateDisasmCPU(
            triple.as_ptr(),
            cpu_c.as_ptr(),
            std::ptr::null_mut(),
            0,
            None,
            None,
        )
    };
    if dc.is_null() {
        return Err(format!("LLVM has no AMDGPU disassembler for `{cpu}`"));
    }
    let mut bytes = code.to_vec();
    let mut out = Vec::new();
    let mut at = 0usize;
    let mut text = vec![0 as std::ffi::c_char; 512];
    while at < bytes.len() {
        let pc = addr + at as u64;
        // SAFETY: the pointer and length stay within `bytes`, and `text`'s
        // length is the size passed; LLVM writes a NUL-terminated string.
        let n = unsafe {
            LLVMDisasmInstruction(
                dc,
                bytes.as_mut_ptr().add(at),
                (bytes.len() - at) as u64,
                pc,
                text.as_mut_ptr(),
                text.len(),
            )
        };
        if n == 0 {
            // SAFETY: `dc` came from LLVMCreateDisasmCPU and is disposed once.
            unsafe { LLVMDisasmDispose(dc) };
            return Err(format!("no {cpu} instruction at address {pc:#x}"));
        }
        // SAFETY: LLVM wrote a NUL-terminated string into `text`.
        let s = unsafe { CStr::from_ptr(text.as_ptr()) }
            .to_string_lossy()
            .trim()
            .to_string();
        let target = branch_target(&s, pc, n as u64);
        out.push(Insn {
            addr: pc,
            size: n as u32,
            text: s,
            target,
        });
        at += n;
    }
    // SAFETY: `dc` came from LLVMCreateDisasmCPU and is disposed once.
    unsafe { LLVMDisasmDispose(dc) };
    Ok(out)
}

/// A scalar branch's destination: its 16-bit signed operand counts dwords
/// from the next instruction.
fn branch_target(text: &str, pc: u64, size: u64) -> Option<u64> {
    let mut parts = text.split_whitespace();
    let m = parts.next()?;
    if !(m == "s_branch" || m.starts_with("s_cbranch_")) {
        return None;
    }
    let imm: i64 = parts.next()?.trim_end_matches(',').parse().ok()?;
    let imm = if imm > i64::from(i16::MAX) {
        imm - 65536
    } else {
        imm
    };
    (pc + size).checked_add_signed(imm * 4)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `s_nop 0`, then `s_branch -2` (back to the nop), then `s_endpgm`,
    /// encoded for gfx9.
    #[test]
    fn branches_resolve_to_their_targets() {
        let code: Vec<u8> = [0xBF80_0000u32, 0xBF82_FFFE, 0xBF81_0000]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let v = disassemble_amdgpu("gfx942", &code, 0x1000).unwrap();
        let names: Vec<&str> = v.iter().map(|i| i.mnemonic()).collect();
        assert_eq!(names, ["s_nop", "s_branch", "s_endpgm"]);
        assert_eq!(v[1].target, Some(0x1000));
        assert_eq!(v[0].target, None);
    }

    #[test]
    fn an_unknown_processor_is_an_error_not_an_abort() {
        let e = disassemble_amdgpu("gfx9999", &[0, 0, 0x80, 0xbf], 0).unwrap_err();
        assert!(e.contains("gfx9999"), "{e}");
    }

    #[test]
    fn undecodable_bytes_are_an_error_with_their_address() {
        let e = disassemble_amdgpu("gfx942", &[0xff, 0xff], 0x40).unwrap_err();
        assert!(e.contains("0x40"), "{e}");
    }
}
