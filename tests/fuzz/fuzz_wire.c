/* tests/fuzz/fuzz_wire.c — msgpack message decoding (every message type,
 * PROGRAM included); a decoded message must encode and decode again. */
#include "tests/fuzz/fuzz_util.h"

#include "common/io/ein_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ein_error err = {0};
    ein_msg m;
    if (ein_msg_decode(data, size, &m, &err) < 0) {
        fuzz_check_msg(&err);
        return 0;
    }
    void *buf = NULL;
    size_t len = 0;
    if (ein_msg_encode(&m, &buf, &len, &err) == 0) {
        ein_msg m2;
        int rc = ein_msg_decode(buf, len, &m2, &err);
        fuzz_check(rc == 0, "re-encoded message does not decode: %s", err.msg);
        fuzz_check(m2.type == m.type, "type %d became %d", (int)m.type, (int)m2.type);
        ein_msg_clear(&m2);
        free(buf);
    }
    ein_msg_clear(&m);
    return 0;
}
