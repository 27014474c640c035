// The few Slurm functions options.cc calls, which the loading process provides at run time.
#include <cstdarg>
#include <cstdio>
#include <string>

extern "C" {
#include <slurm/spank.h>

#include <cstddef>
}

std::string g_last_slurm_error;

extern "C" void slurm_error(const char* format, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, format);
  vsnprintf(buf, sizeof(buf), format, ap);
  va_end(ap);
  g_last_slurm_error = buf;
}

extern "C" spank_err_t spank_option_register(spank_t, struct spank_option*) {
  return static_cast<spank_err_t>(ESPANK_SUCCESS);
}
