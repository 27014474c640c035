// A stand-in trainer for launcher tests. Prints its AX_* environment (AX_JOB_SECRET only as its
// length and a fingerprint: tests check that ranks share it without printing it) and its memory
// policy ("mempolicy=default", "mempolicy=prefer nodes=0", read with get_mempolicy), then does what
// the first argument matching its AX_RANK says ("R=ACTION", or "*=ACTION" for any rank):
//   exit:N          exit with status N
//   kill:S          kill itself with signal S
//   sleep:S         sleep S seconds, then exit 0
//   late-exit:N     sleep half a second (so the other ranks are ready), then exit N
//   wait-term:N     print "ready", wait for SIGTERM/SIGUSR1/SIGINT, exit N
//   ignore-term     ignore SIGTERM, print "ready", sleep forever
//   fail-once:PATH  exit 3 if PATH does not exist (creating it), else exit 0
// No matching argument: exit 0.
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

volatile sig_atomic_t g_signalled = 0;
void on_signal(int) { g_signalled = 1; }

int act(const std::string& action) {
  std::string verb = action.substr(0, action.find(':'));
  std::string arg =
      action.find(':') == std::string::npos ? "" : action.substr(action.find(':') + 1);
  if (verb == "exit") return std::atoi(arg.c_str());
  if (verb == "kill") {
    raise(std::atoi(arg.c_str()));
    return 99;
  }
  if (verb == "sleep") {
    sleep(static_cast<unsigned>(std::atoi(arg.c_str())));
    return 0;
  }
  if (verb == "late-exit") {
    usleep(500000);
    return std::atoi(arg.c_str());
  }
  if (verb == "wait-term") {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    for (int sig : {SIGTERM, SIGUSR1, SIGINT}) sigaction(sig, &sa, nullptr);
    std::printf("ready\n");
    std::fflush(stdout);
    while (!g_signalled) pause();
    std::printf("got signal\n");
    return std::atoi(arg.c_str());
  }
  if (verb == "ignore-term") {
    signal(SIGTERM, SIG_IGN);
    std::printf("ready\n");
    std::fflush(stdout);
    for (;;) pause();
  }
  if (verb == "fail-once") {
    int fd = open(arg.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd >= 0) {
      close(fd);
      std::printf("first attempt: failing\n");
      return 3;
    }
    return 0;
  }
  std::fprintf(stderr, "fake_rank: unknown action '%s'\n", action.c_str());
  return 98;
}

void print_memory_policy() {
  constexpr int kBits = 8 * sizeof(unsigned long);
  unsigned long mask[1024 / kBits] = {};
  int mode = -1;
  if (syscall(SYS_get_mempolicy, &mode, mask, 1024UL + 1, nullptr, 0UL) != 0) {
    std::printf("mempolicy=unknown\n");
    return;
  }
  const char* names[] = {"default", "prefer", "bind", "interleave", "local"};
  int base = mode & ~(MPOL_F_STATIC_NODES | MPOL_F_RELATIVE_NODES);
  std::string line = base >= 0 && base < 5 ? names[base] : std::to_string(mode);
  std::string nodes;
  for (int n = 0; n < 1024; ++n) {
    if (((mask[n / kBits] >> (n % kBits)) & 1UL) == 0) continue;
    if (!nodes.empty()) nodes += ',';
    nodes += std::to_string(n);
  }
  if (!nodes.empty()) line += " nodes=" + nodes;
  std::printf("mempolicy=%s\n", line.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const char* names[] = {"AX_RANK",      "AX_WORLD_SIZE", "AX_LOCAL_RANK",  "AX_LOCAL_WORLD_SIZE",
                         "AX_NODE_RANK", "AX_NNODES",     "AX_ICI_MESH",    "AX_DCN_MESH",
                         "AX_MESH_SPEC", "AX_DEVICE",     "AX_COORDINATOR", "NCCL_IB_HCA"};
  for (const char* name : names) {
    const char* v = std::getenv(name);
    std::printf("%s=%s\n", name, v != nullptr ? v : "<unset>");
  }
  // FNV-1a: a test's fingerprint, not a cryptographic one.
  if (const char* secret = std::getenv("AX_JOB_SECRET")) {
    uint32_t h = 2166136261u;
    for (const char* c = secret; *c != '\0'; ++c)
      h = (h ^ static_cast<unsigned char>(*c)) * 16777619u;
    std::printf("AX_JOB_SECRET=<%zu characters, fingerprint %08x>\n", std::strlen(secret), h);
  } else {
    std::printf("AX_JOB_SECRET=<unset>\n");
  }
  print_memory_policy();
  std::fprintf(stderr, "stderr line\n");
  std::fflush(stdout);
  const char* rank_env = std::getenv("AX_RANK");
  std::string rank = rank_env != nullptr ? rank_env : "";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    size_t eq = a.find('=');
    if (eq == std::string::npos) continue;
    std::string who = a.substr(0, eq);
    if (who == "*" || who == rank) return act(a.substr(eq + 1));
  }
  return 0;
}
