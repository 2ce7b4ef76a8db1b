/* Example: CRC32C and CRC64-NVMe of a file, streamed in 64 KiB reads.
 *   cargo build --release -p csumkit-capi
 *   cc -O2 -I crates/csumkit-capi/include crates/csumkit-capi/examples/checksum_file.c \
 *      target/release/libcsumkit.a -lpthread -ldl -lm -o checksum_file
 *   ./checksum_file README.md */
#include "csumkit.h"

#include <stdio.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  FILE *f = fopen(argv[1], "rb");
  if (!f) {
    perror(argv[1]);
    return 1;
  }
  csumkit_crc32c_state c32;
  csumkit_crc64nvme_state c64;
  csumkit_crc32c_init(&c32);
  csumkit_crc64nvme_init(&c64);
  static uint8_t buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
    csumkit_crc32c_update(&c32, buf, n);
    csumkit_crc64nvme_update(&c64, buf, n);
  }
  int failed = ferror(f);
  fclose(f);
  if (failed) {
    perror(argv[1]);
    return 1;
  }
  printf("crc32c %08x  crc64nvme %016llx  %llu bytes  (%s)\n", csumkit_crc32c_final(&c32),
         (unsigned long long)csumkit_crc64nvme_final(&c64), (unsigned long long)c32.length,
         csumkit_backend());
  return 0;
}
