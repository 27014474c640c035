// The TCP store's challenge-response handshake (docs/bootstrap.md, docs/threat-model.md): both
// sides prove that they hold the job secret with an HMAC-SHA256 (OpenSSL's libcrypto) over both
// nonces, so the secret never crosses the wire and a recorded handshake cannot be replayed.
#pragma once

#include <string>
#include <string_view>

namespace ax::train::comm::auth {

// kNonceBytes from OpenSSL's generator.
std::string nonce();

// What the client sends (proves it holds the secret), and what the server answers (proves that
// the client reached this job's rank 0, not a stranger listening on the port). Different labels
// keep one from standing in for the other.
std::string client_proof(std::string_view secret, std::string_view server_nonce,
                         std::string_view client_nonce);
std::string server_proof(std::string_view secret, std::string_view server_nonce,
                         std::string_view client_nonce);

// Constant-time comparison of two proofs.
bool same_proof(std::string_view a, std::string_view b);

}  // namespace ax::train::comm::auth
