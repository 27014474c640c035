// A stranger at a TCP store's port, for tests: threads that connect over and over without the
// job's secret and try every way in: requests without a handshake, a handshake proved with
// another job's secret, garbage, and connections held open doing nothing.
#pragma once

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace ax::train::comm::testing {

// A SET of `set_key` and a GET of `get_key`, framed as the store's requests, sent without the
// handshake.
std::string requests_without_handshake(const std::string& set_key, const std::string& value,
                                       const std::string& get_key);

class Stranger {
 public:
  struct Tally {
    int connections = 0;          // accepted by the port
    int refused = 0;              // told "refused" (the server's answer to a wrong try)
    int answered = 0;             // got any reply to a request or handshake but a refusal: a breach
    int other_job_greetings = 0;  // greeted by the store before trying another job's proof
  };

  // Starts `threads` threads hammering 127.0.0.1:port (a port nobody listens on yet is tried
  // again until stop()).
  Stranger(int port, int threads);
  ~Stranger();
  Stranger(const Stranger&) = delete;
  Stranger& operator=(const Stranger&) = delete;

  // Stops the threads and returns what they saw.
  Tally stop();

 private:
  void run(int thread);

  int port_;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0}, refused_{0}, answered_{0}, greetings_{0};
  std::vector<std::thread> threads_;
};

}  // namespace ax::train::comm::testing
