// Helpers shared by the store implementations (store*.cc).
#pragma once

#include <string>
#include <vector>

#include "ax/trainer/comm/store.h"

namespace ax::train::comm {

// TCP_NODELAY on a store connection: requests and replies are small and answered at once.
void set_nodelay(int fd);

// "30 s", "0.5 s".
std::string seconds_text(Millis timeout);
// "rank 3", "ranks 3, 5" (the first 16, then "and N more").
std::string ranks_text(const std::vector<int>& ranks);
// "'a', 'b'" (the first few, then "and N more").
std::string keys_text(const std::vector<std::string>& keys);

}  // namespace ax::train::comm
