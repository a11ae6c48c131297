//! Reading AMDGPU code objects: ELF header, target, the metadata note
//! (msgpack), symbols, and rocmc's launch section. Any input, however
//! malformed, gives a value or an error, never a panic.

use crate::launch::LaunchInfo;
use goblin::elf::Elf;
use rmpv::Value;

pub const EM_AMDGPU: u16 = 224;
pub const ELFOSABI_AMDGPU_HSA: u8 = 64;
const NT_AMDGPU_METADATA: u32 = 32;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ReadError {
    #[error("not an ELF file: {0}")]
    NotElf(String),
    #[error("not an AMDGPU code object: {0}")]
    NotAmdgpu(String),
    #[error("corrupt code object: {0}")]
    Corrupt(String),
}

/// One kernel argument as the metadata describes it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ArgInfo {
    pub name: Option<String>,
    pub offset: u64,
    pub size: u64,
    /// `global_buffer`, `by_value`, `hidden_block_count_x`, ...
    pub value_kind: String,
    pub address_space: Option<String>,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct KernelInfo {
    pub name: String,
    pub symbol: String,
    pub args: Vec<ArgInfo>,
    pub kernarg_segment_size: u64,
    pub group_segment_fixed_size: u64,
    pub private_segment_fixed_size: u64,
    pub sgpr_count: u64,
    pub vgpr_count: u64,
    pub agpr_count: Option<u64>,
    pub sgpr_spill_count: u64,
    pub vgpr_spill_count: u64,
    pub wavefront_size: u64,
    pub max_flat_workgroup_size: u64,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CodeObject {
    /// `amdhsa.target`, e.g. `amdgcn-amd-amdhsa--gfx90a:xnack-`.
    pub target: String,
    /// ELF `e_ident[EI_ABIVERSION]`.
    pub abi_version: u8,
    /// Code object version implied by the ABI version (4, 5, 6).
    pub code_object_version: u32,
    pub e_flags: u32,
    pub kernels: Vec<KernelInfo>,
    /// Dynamic symbols (kernel symbols and their `.kd` descriptors).
    pub symbols: Vec<String>,
    /// rocmc's launch geometry, when rocmc wrote the file.
    #[serde(skip)]
    pub launch: Option<LaunchInfo>,
}

impl CodeObject {
    /// The target ID part of [`Self::target`] (`gfx90a:xnack-`).
    pub fn target_id(&self) -> &str {
        // `amdgcn-amd-amdhsa--gfx942:xnack-`; some producers (Triton's
        // LLVM) write other triples before the processor.
        match self.target.rfind("-gfx") {
            Some(i) => &self.target[i + 1..],
            None => self.target.rsplit("--").next().unwrap_or(&self.target),
        }
    }
}

fn field<'a>(map: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn u(map: &[(Value, Value)], key: &str) -> u64 {
    field(map, key).and_then(Value::as_u64).unwrap_or(0)
}

fn s(map: &[(Value, Value)], key: &str) -> Option<String> {
    field(map, key).and_then(Value::as_str).map(str::to_string)
}

/// Parses a code object.
pub fn read(bytes: &[u8]) -> Result<CodeObject, ReadError> {
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" {
        return Err(ReadError::NotElf(format!(
            "{} bytes without an ELF header",
            bytes.len()
        )));
    }
    let elf = Elf::parse(bytes).map_err(|e| ReadError::Corrupt(e.to_string()))?;
    if elf.header.e_machine != EM_AMDGPU {
        return Err(ReadError::NotAmdgpu(format!(
            "e_machine is {}, not EM_AMDGPU ({EM_AMDGPU})",
            elf.header.e_machine
        )));
    }
    let osabi = elf.header.e_ident[7];
    if osabi != ELFOSABI_AMDGPU_HSA {
        return Err(ReadError::NotAmdgpu(format!(
            "OS/ABI is {osabi}, not AMDGPU_HSA ({ELFOSABI_AMDGPU_HSA})"
        )));
    }
    let abi_version = elf.header.e_ident[8];
    let code_object_version = match abi_version {
        2 => 4,
        3 => 5,
        4 => 6,
        v => {
            return Err(ReadError::NotAmdgpu(format!(
                "unsupported ELF ABI version {v} (code object v4, v5 and v6 have 2, 3 and 4)"
            )))
        }
    };

    let mut meta: Option<Value> = None;
    if let Some(notes) = elf.iter_note_headers(bytes) {
        for n in notes {
            let n = n.map_err(|e| ReadError::Corrupt(format!("note: {e}")))?;
            if n.n_type == NT_AMDGPU_METADATA && n.name == "AMDGPU" {
                let mut r = n.desc;
                meta = Some(rmpv::decode::read_value(&mut r).map_err(|e| {
                    ReadError::Corrupt(format!("metadata note is not msgpack: {e}"))
                })?);
            }
        }
    }
    let meta = meta.ok_or_else(|| ReadError::Corrupt("no AMDGPU metadata note".into()))?;
    let top = meta
        .as_map()
        .ok_or_else(|| ReadError::Corrupt("metadata is not a map".into()))?;
    let target = s(top, "amdhsa.target").unwrap_or_default();
    let mut kernels = Vec::new();
    for k in field(top, "amdhsa.kernels")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let Some(k) = k.as_map() else {
            return Err(ReadError::Corrupt("kernel entry is not a map".into()));
        };
        let args = field(k, ".args")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_map)
            .map(|a| ArgInfo {
                name: s(a, ".name"),
                offset: u(a, ".offset"),
                size: u(a, ".size"),
                value_kind: s(a, ".value_kind").unwrap_or_default(),
                address_space: s(a, ".address_space"),
            })
            .collect();
        kernels.push(KernelInfo {
            name: s(k, ".name").unwrap_or_default(),
            symbol: s(k, ".symbol").unwrap_or_default(),
            args,
            kernarg_segment_size: u(k, ".kernarg_segment_size"),
            group_segment_fixed_size: u(k, ".group_segment_fixed_size"),
            private_segment_fixed_size: u(k, ".private_segment_fixed_size"),
            sgpr_count: u(k, ".sgpr_count"),
            vgpr_count: u(k, ".vgpr_count"),
            agpr_count: field(k, ".agpr_count").and_then(Value::as_u64),
            sgpr_spill_count: u(k, ".sgpr_spill_count"),
            vgpr_spill_count: u(k, ".vgpr_spill_count"),
            wavefront_size: u(k, ".wavefront_size"),
            max_flat_workgroup_size: u(k, ".max_flat_workgroup_size"),
        });
    }

    let symbols = elf
        .dynsyms
        .iter()
        .filter_map(|sym| elf.dynstrtab.get_at(sym.st_name))
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();

    let launch = crate::launch_section(&elf, bytes)
        .transpose()
        .map_err(ReadError::Corrupt)?;
    Ok(CodeObject {
        target,
        abi_version,
        code_object_version,
        e_flags: elf.header.e_flags,
        kernels,
        symbols,
        launch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_refused_without_panicking() {
        assert!(matches!(read(b"hello"), Err(ReadError::NotElf(_))));
        let mut fake = vec![0u8; 128];
        fake[..4].copy_from_slice(b"\x7fELF");
        assert!(read(&fake).is_err());
    }
}
