/* C test of libcsumkit: published check values, streaming vs one-shot,
 * the algebra against recomputation, error statuses; then checksums of
 * pseudo-random data printed one per line for tests/c_programs.rs to compare
 * with the Rust library. Exit status 0 only when every check passed. */
#include "csumkit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      failures++;                                                          \
    }                                                                      \
  } while (0)


/* The one-shot functions report a NULL buffer with a length, so they return a
 * status and write the checksum through a pointer; these wrappers keep the
 * expressions below short and check every status. */
static uint32_t c32(uint32_t crc, const uint8_t *d, size_t n) {
  uint32_t out = 0;
  CHECK(csumkit_crc32c(crc, d, n, &out) == CSUMKIT_OK);
  return out;
}
static uint64_t c64(uint64_t crc, const uint8_t *d, size_t n) {
  uint64_t out = 0;
  CHECK(csumkit_crc64nvme(crc, d, n, &out) == CSUMKIT_OK);
  return out;
}
static uint16_t c16(uint16_t crc, const uint8_t *d, size_t n) {
  uint16_t out = 0;
  CHECK(csumkit_crc16t10dif(crc, d, n, &out) == CSUMKIT_OK);
  return out;
}

static uint64_t rng_state;

static uint8_t next_byte(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (uint8_t)(rng_state >> 24);
}

static void fill(uint8_t *buf, size_t len, uint64_t seed) {
  rng_state = seed | 1;
  for (size_t i = 0; i < len; i++) buf[i] = next_byte();
}

static void check_values(void) {
  const uint8_t *check = (const uint8_t *)"123456789";
  CHECK(c32(0, check, 9) == 0xE3069283u);
  CHECK(c64(0, check, 9) == 0xAE8B14860A799888ull);
  CHECK(c16(0, check, 9) == 0xD0DB);
  CHECK(c32(c32(0, check, 4), check + 4, 5) == 0xE3069283u);
  CHECK(c32(0, NULL, 0) == 0);
}

static void streaming_and_algebra(void) {
  enum { LEN = 100000 };
  uint8_t *buf = malloc(LEN);
  fill(buf, LEN, 7);
  csumkit_crc64nvme_state st;
  CHECK(csumkit_crc64nvme_init(&st) == CSUMKIT_OK);
  for (size_t at = 0; at < LEN; at += 777) {
    size_t n = LEN - at < 777 ? LEN - at : 777;
    CHECK(csumkit_crc64nvme_update(&st, buf + at, n) == CSUMKIT_OK);
  }
  CHECK(csumkit_crc64nvme_final(&st) == c64(0, buf, LEN));
  CHECK(st.length == LEN);

  uint32_t a = c32(0, buf, 1234), b = c32(0, buf + 1234, LEN - 1234);
  CHECK(csumkit_crc32c_combine(a, b, LEN - 1234) == c32(0, buf, LEN));
  uint8_t zeros[300] = {0};
  CHECK(csumkit_crc16t10dif_zero_extend(c16(0, buf, 50), 300) ==
        c16(c16(0, buf, 50), zeros, 300));

  /* flip bits 1000..1013 of the first 4096 bytes (Linux bit order: LSB first) */
  uint32_t before = c32(0, buf, 4096), after = 0;
  CHECK(csumkit_crc32c_flip_range(before, 4096 * 8, 1000, 13, &after) == CSUMKIT_OK);
  for (int bit = 1000; bit < 1013; bit++) buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
  CHECK(after == c32(0, buf, 4096));

  /* splice 12 bytes at offset 300 of a 4096-byte block */
  uint8_t old[12], new_[12];
  memcpy(old, buf + 300, 12);
  fill(new_, 12, 99);
  uint64_t crc64 = c64(0, buf, 4096), spliced = 0;
  CHECK(csumkit_crc64nvme_splice(crc64, 4096, 300, old, new_, 12, &spliced) == CSUMKIT_OK);
  memcpy(buf + 300, new_, 12);
  CHECK(spliced == c64(0, buf, 4096));
  free(buf);
}

static void errors(void) {
  uint16_t out16 = 0;
  CHECK(csumkit_crc16t10dif_flip_range(0, 64, 60, 5, &out16) == CSUMKIT_BIT_RANGE_OUT_OF_BOUNDS);
  CHECK(csumkit_crc16t10dif_flip_range(0, 63, 0, 1, &out16) == CSUMKIT_TOTAL_BITS_NOT_WHOLE_BYTES);
  CHECK(csumkit_crc16t10dif_flip_range(0, 64, 0, 1, NULL) == CSUMKIT_NULL_POINTER);
  uint32_t out32 = 0;
  uint8_t x[4] = {1, 2, 3, 4};
  CHECK(csumkit_crc32c_splice(0, 10, 8, x, x, 4, &out32) == CSUMKIT_BYTE_RANGE_OUT_OF_BOUNDS);
  CHECK(csumkit_crc32c_splice(0, 10, 0, NULL, x, 4, &out32) == CSUMKIT_NULL_POINTER);
  CHECK(csumkit_crc32c_update(NULL, x, 4) == CSUMKIT_NULL_POINTER);
  uint32_t untouched = 7;
  CHECK(csumkit_crc32c(0, NULL, 5, &untouched) == CSUMKIT_NULL_POINTER && untouched == 7);
  CHECK(csumkit_crc32c(0, x, 4, NULL) == CSUMKIT_NULL_POINTER);
  uint64_t untouched64 = 7;
  CHECK(csumkit_crc64nvme(0, NULL, 1, &untouched64) == CSUMKIT_NULL_POINTER && untouched64 == 7);
  uint16_t untouched16 = 7;
  CHECK(csumkit_crc16t10dif(0, NULL, 1, &untouched16) == CSUMKIT_NULL_POINTER && untouched16 == 7);
  CHECK(strcmp(csumkit_status_str(CSUMKIT_OK), "ok") == 0);
  CHECK(strcmp(csumkit_status_str(2), "bit range is outside the buffer") == 0);
  CHECK(strcmp(csumkit_status_str(12345), "unknown status code") == 0);
  CHECK(strlen(csumkit_version()) > 0);
  CHECK(strlen(csumkit_backend()) > 0);
}

int main(void) {
  check_values();
  streaming_and_algebra();
  errors();
  /* Random data for the Rust side to compare: "algo seed len crc" */
  static uint8_t buf[70000];
  const size_t lens[] = {0, 1, 7, 8, 15, 16, 63, 64, 255, 256, 1000, 4096, 4097, 65536, 70000};
  for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
    uint64_t seed = 1000 + i;
    fill(buf, lens[i], seed);
    printf("crc32c %llu %zu %llx\n", (unsigned long long)seed, lens[i],
           (unsigned long long)c32(0, buf, lens[i]));
    printf("crc64nvme %llu %zu %llx\n", (unsigned long long)seed, lens[i],
           (unsigned long long)c64(0, buf, lens[i]));
    printf("crc16t10dif %llu %zu %llx\n", (unsigned long long)seed, lens[i],
           (unsigned long long)c16(0, buf, lens[i]));
  }
  printf("backend %s version %s\n", csumkit_backend(), csumkit_version());
  if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
  return failures ? 1 : 0;
}
