// lld's ELF driver as a C function. lld keeps global state, so the Rust
// side serialises calls; diagnostics go to a string, never to the terminal.
#include "lld/Common/Driver.h"
#include "llvm/Support/raw_ostream.h"
#include <cstdlib>
#include <cstring>
#include <string>

LLD_HAS_DRIVER(elf)

extern "C" {

// Links with the given argv (argv[0] names the flavour, e.g. "ld.lld").
// Returns lld's exit code; *diag receives malloc'd, NUL-terminated output
// (free with rocmc_lld_free); *can_run_again is 0 if lld says it must not be
// called again in this process.
int rocmc_lld_link(const char **argv, int argc, char **diag, int *can_run_again) {
  std::string out, err;
  llvm::raw_string_ostream os(out), es(err);
  lld::Result r = lld::lldMain(llvm::ArrayRef<const char *>(argv, argc), os, es,
                               {{lld::Gnu, &lld::elf::link}});
  os.flush();
  es.flush();
  std::string all = out + err;
  char *buf = (char *)std::malloc(all.size() + 1);
  if (buf) {
    std::memcpy(buf, all.data(), all.size());
    buf[all.size()] = 0;
  }
  *diag = buf;
  *can_run_again = r.canRunAgain ? 1 : 0;
  return r.retCode;
}

void rocmc_lld_free(char *p) { std::free(p); }
}
