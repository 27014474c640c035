// AX_CHECK: invariants that, when broken, mean a bug in ax. Prints file:line, the condition and
// the streamed message, then aborts. Never used for input a user can get wrong (use Status).
#pragma once

#include <sstream>

namespace ax::internal {

class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition);
  [[noreturn]] ~CheckFailure();
  std::ostream& stream() { return os_; }

 private:
  std::ostringstream os_;
};

// Lets `cond ? (void)0 : Voidify() & stream << ...` type-check.
struct Voidify {
  void operator&(std::ostream&) {}
};

}  // namespace ax::internal

#define AX_CHECK(cond)                 \
  (cond) ? (void)0                     \
         : ::ax::internal::Voidify() & \
               ::ax::internal::CheckFailure(__FILE__, __LINE__, #cond).stream()

#define AX_CHECK_OP(a, op, b) AX_CHECK((a)op(b)) << "(" << (a) << " vs " << (b) << ") "
#define AX_CHECK_EQ(a, b) AX_CHECK_OP(a, ==, b)
#define AX_CHECK_NE(a, b) AX_CHECK_OP(a, !=, b)
#define AX_CHECK_LT(a, b) AX_CHECK_OP(a, <, b)
#define AX_CHECK_LE(a, b) AX_CHECK_OP(a, <=, b)
#define AX_CHECK_GT(a, b) AX_CHECK_OP(a, >, b)
#define AX_CHECK_GE(a, b) AX_CHECK_OP(a, >=, b)

// Aborts if a Status is not ok; for code paths where an error is a bug.
#define AX_CHECK_OK(expr)                                            \
  do {                                                               \
    ::ax::Status ax_check_status_ = (expr);                          \
    AX_CHECK(ax_check_status_.ok()) << ax_check_status_.to_string(); \
  } while (0)
