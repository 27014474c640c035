// File (and port) helpers every test suite uses.
#pragma once

#include <string>

namespace ax::testing {

// A fresh empty directory under $TMPDIR (or /tmp), removed with its contents when the test
// binary exits.
std::string temp_dir(const std::string& tag);
void write_file(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);

// A TCP port on 127.0.0.1 that was free a moment ago, for a test's store: a random one below the
// kernel's ephemeral range (which nothing else is handed), the kernel's pick where there is no
// room.
int free_port();

}  // namespace ax::testing
