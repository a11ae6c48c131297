// The parts of LLVM's AMDGPU target parser that the C API does not expose:
// the processor table and each processor's features. Pure functions, no
// global state; strings are returned through caller-owned buffers.
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/TargetParser/TargetParser.h"
#include <cstring>
#include <string>

extern "C" {

// Writes the names of all AMDGCN processors, newline-separated, into buf.
// Returns the length needed (excluding the terminator).
size_t rocmc_amdgcn_processors(char *buf, size_t cap) {
  llvm::SmallVector<llvm::StringRef, 128> names;
  llvm::AMDGPU::fillValidArchListAMDGCN(names);
  std::string all;
  for (auto n : names) {
    all += n.str();
    all += '\n';
  }
  if (buf && cap) {
    size_t k = all.size() < cap - 1 ? all.size() : cap - 1;
    std::memcpy(buf, all.data(), k);
    buf[k] = 0;
  }
  return all.size();
}

// Feature bits of a processor (llvm::AMDGPU::ArchFeatureKind), or -1 when
// LLVM does not know the name.
long long rocmc_amdgcn_arch_features(const char *name) {
  auto kind = llvm::AMDGPU::parseArchAMDGCN(name);
  if (kind == llvm::AMDGPU::GK_NONE)
    return -1;
  return (long long)llvm::AMDGPU::getArchAttrAMDGCN(kind);
}

// Canonical processor name (resolves aliases LLVM knows), into buf.
size_t rocmc_amdgcn_canonical_name(const char *name, char *buf, size_t cap) {
  auto kind = llvm::AMDGPU::parseArchAMDGCN(name);
  std::string s = llvm::AMDGPU::getArchNameAMDGCN(kind).str();
  if (buf && cap) {
    size_t k = s.size() < cap - 1 ? s.size() : cap - 1;
    std::memcpy(buf, s.data(), k);
    buf[k] = 0;
  }
  return s.size();
}
}

// The NVPTX processors of LLVM's registered NVPTX target (the caller
// initialises it first), newline-separated, into buf. Returns the length
// needed (excluding the terminator), or 0 when the target is not registered.
#include "llvm/MC/MCSubtargetInfo.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/TargetParser/Triple.h"
#include <memory>

extern "C" size_t rocmc_nvptx_processors(char *buf, size_t cap) {
  std::string err;
  llvm::Triple triple("nvptx64-nvidia-cuda");
  const llvm::Target *t = llvm::TargetRegistry::lookupTarget(triple, err);
  if (!t)
    return 0;
  std::unique_ptr<llvm::MCSubtargetInfo> sti(
      t->createMCSubtargetInfo(triple, "", ""));
  if (!sti)
    return 0;
  std::string all;
  for (const auto &p : sti->getAllProcessorDescriptions()) {
    all += p.Key;
    all += '\n';
  }
  if (buf && cap) {
    size_t k = all.size() < cap - 1 ? all.size() : cap - 1;
    std::memcpy(buf, all.data(), k);
    buf[k] = 0;
  }
  return all.size();
}
