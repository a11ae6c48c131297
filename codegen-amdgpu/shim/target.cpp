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
