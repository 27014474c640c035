#include "store_auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "ax/common/check.h"
#include "store_wire.h"

namespace ax::train::comm::auth {

namespace {

std::string hmac(std::string_view secret, std::string_view label, std::string_view server_nonce,
                 std::string_view client_nonce) {
  std::string message(label);
  message.push_back('\0');
  message.append(server_nonce);
  message.append(client_nonce);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  const unsigned char* ok =
      HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
           reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &len);
  AX_CHECK(ok != nullptr && len == wire::kProofBytes) << "HMAC-SHA256 failed";
  return std::string(reinterpret_cast<const char*>(out), len);
}

}  // namespace

std::string nonce() {
  std::string out(wire::kNonceBytes, '\0');
  AX_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(out.size())) ==
           1)
      << "OpenSSL's random generator failed";
  return out;
}

std::string client_proof(std::string_view secret, std::string_view server_nonce,
                         std::string_view client_nonce) {
  return hmac(secret, "ax-store client", server_nonce, client_nonce);
}

std::string server_proof(std::string_view secret, std::string_view server_nonce,
                         std::string_view client_nonce) {
  return hmac(secret, "ax-store server", server_nonce, client_nonce);
}

bool same_proof(std::string_view a, std::string_view b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace ax::train::comm::auth
