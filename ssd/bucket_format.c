/* SPDX-License-Identifier: MIT */
/*
 * ssd/bucket_format.c — the bucket file format in memory and back: a
 * record's head (encode, decode, check, which record it is), a bucket's
 * header and trailer, the size of its index entries, and the chunk
 * checksums. Buffers in, buffers out: no file, no lock, no policy
 * (ssd/format.h draws the disk).
 *
 * Layer: the bottom of the bucket files; calls nothing in ssd/.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "ssd/bucket_int.h"

/* The longest KV_REC_EXTENT record value (ssd/format.h): one 2 MiB extent. */
#define EXTENT_MAX (2u << 20)

uint64_t kv_loc_size(const struct kv_loc *loc)
{
	return loc->kl_head_len + ROUND_UP(loc->kl_len);
}

/*
 * The checksum of `len` bytes spread over iov from byte `skip`: straight
 * from the buffer when they lie in one iovec, else gathered into scratch
 * (CHUNK bytes).
 */
uint64_t kv_bkt_hash_iov(const struct iovec *iov, int cnt, uint64_t skip, uint64_t len,
			 char *scratch)
{
	uint64_t got = 0;

	for (int i = 0; i < cnt && got < len; i++) {
		uint64_t n = iov[i].iov_len;
		const char *p = iov[i].iov_base;

		if (skip >= n) {
			skip -= n;
			continue;
		}
		p += skip;
		n -= skip;
		skip = 0;
		if (got == 0 && n >= len)
			return XXH3_64bits(p, len);
		if (n > len - got)
			n = len - got;
		memcpy(scratch + got, p, n);
		got += n;
	}
	return XXH3_64bits(scratch, got);
}

/* Checksums of the chunks of a `len`-byte value held in iov. */
static int chunk_csums(const struct iovec *iov, int cnt, uint64_t len, uint64_t *out)
{
	char *scratch = malloc(CHUNK);

	if (!scratch)
		return -ENOMEM;
	for (uint64_t c = 0; c * CHUNK < len; c++) {
		uint64_t n = len - c * CHUNK < CHUNK ? len - c * CHUNK : CHUNK;

		out[c] = kv_bkt_hash_iov(iov, cnt, c * CHUNK, n, scratch);
	}
	free(scratch);
	return 0;
}

/* Bytes of the head struct of a record of `version`: its key follows them. */
static size_t head_struct_len(uint16_t version)
{
	return version == 1 ? KV_REC_HEAD_V1 : sizeof(struct kv_rec_head);
}

/*
 * The head struct at buf (at least sizeof(struct kv_rec_head) bytes), of
 * either version, in one shape: a version 1 head (56 bytes) reads as
 * KV_REC_WHOLE, extent index 0. Everything but kv_bkt_head_check sees heads
 * through this. Returns the bytes the struct takes on disk (where the key
 * starts).
 */
size_t kv_bkt_head_get(const void *buf, struct kv_rec_head *h)
{
	memcpy(h, buf, sizeof(*h));
	if (h->rh_version != 1)
		return sizeof(*h);
	h->rh_flags = KV_REC_WHOLE;
	h->rh_ext_index = 0;
	h->rh_pad2 = 0;
	return KV_REC_HEAD_V1;
}

/*
 * The head checksum: the head struct as on disk (slen bytes) with the
 * field zeroed, the key, the chunk checksums.
 */
static uint64_t head_csum(const void *head, size_t slen, const void *key, const void *csums)
{
	struct kv_rec_head c;
	XXH3_state_t st;

	memcpy(&c, head, slen);
	c.rh_head_csum = 0;
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, &c, slen);
	XXH3_64bits_update(&st, key, c.rh_key_len);
	XXH3_64bits_update(&st, csums, (size_t)c.rh_nchunks * 8);
	return XXH3_64bits_digest(&st);
}

/*
 * Whether a version 2 record may have these flags, extent index and value
 * length: exactly one KV_REC_* flag; a WHOLE record is extent 0, a
 * MANIFEST is KV_MANIFEST_INDEX, an EXTENT anything else and at most
 * EXTENT_MAX bytes. kv_bucket_append writes nothing else, kv_bkt_head_check reads
 * nothing else.
 */
bool kv_bkt_rec_shape_ok(uint16_t flags, uint32_t index, uint64_t value_len)
{
	switch (flags) {
	case KV_REC_WHOLE:
		return index == 0;
	case KV_REC_EXTENT:
		return index != KV_MANIFEST_INDEX && value_len <= EXTENT_MAX;
	case KV_REC_MANIFEST:
		return index == KV_MANIFEST_INDEX;
	default:
		return false;
	}
}

/*
 * Checks a record head at the start of buf (buf_len bytes of it present,
 * at least one block): a version 1 head (flags 0, its 56-byte struct under
 * the checksum) or a version 2 one (kv_bkt_rec_shape_ok, rh_pad2 0). Returns 0,
 * -EAGAIN when the head is longer than buf_len (read more), or -EIO when
 * it is not a valid head.
 */
int kv_bkt_head_check(const void *buf, uint64_t buf_len)
{
	struct kv_rec_head h;
	const char *key;

	memcpy(&h, buf, sizeof(h));
	if (h.rh_magic != KV_REC_MAGIC)
		return -EIO;
	if (h.rh_version == 1
		? h.rh_flags != 0
		: h.rh_version != 2 || h.rh_pad2 ||
		      !kv_bkt_rec_shape_ok(h.rh_flags, h.rh_ext_index, h.rh_value_len))
		return -EIO;
	if (h.rh_chunk_shift != KV_CHUNK_SHIFT || h.rh_key_len > 4096 ||
	    h.rh_nchunks != (h.rh_value_len + CHUNK - 1) / CHUNK ||
	    h.rh_head_len != kv_rec_head_len_v(h.rh_version, h.rh_key_len, h.rh_value_len))
		return -EIO;
	if (h.rh_head_len > buf_len)
		return -EAGAIN;
	key = (const char *)buf + head_struct_len(h.rh_version);
	if (head_csum(buf, head_struct_len(h.rh_version), key, key + h.rh_key_len) !=
		h.rh_head_csum ||
	    XXH3_64bits(key + h.rh_key_len, (size_t)h.rh_nchunks * 8) != h.rh_payload_csum)
		return -EIO;
	return 0;
}

/* Whether a checked head (kv_bkt_head_get's shape) is the record loc names. */
bool kv_bkt_head_is(const struct kv_rec_head *h, const struct kv_loc *loc)
{
	return h->rh_seq == loc->kl_seq && h->rh_value_len == loc->kl_len &&
	       h->rh_head_len == loc->kl_head_len && h->rh_ext_index == loc->kl_index;
}

/* The chunk checksums of a checked head, copied out (8-byte aligned, malloc'ed) or NULL. */
uint64_t *kv_bkt_head_csums(const void *head)
{
	struct kv_rec_head h;
	size_t slen = kv_bkt_head_get(head, &h);
	uint64_t *csums = malloc((size_t)h.rh_nchunks * 8 + 8);

	if (csums)
		memcpy(csums, (const char *)head + slen + h.rh_key_len, (size_t)h.rh_nchunks * 8);
	return csums;
}

/* Bytes a record adds to its bucket's index block. */
uint64_t kv_bkt_idx_bytes(uint32_t key_len)
{
	return sizeof(struct kv_idx_ent) + (key_len + 7) / 8 * 8;
}

/* Whether h is a whole header of this format: magic, version and checksum. */
bool kv_bkt_header_ok(const struct kv_bucket_hdr *h)
{
	struct kv_bucket_hdr c = *h;

	c.bh_csum = 0;
	return h->bh_magic == KV_BUCKET_MAGIC && h->bh_version == KV_FORMAT_VERSION &&
	       XXH3_64bits(&c, sizeof(c)) == h->bh_csum;
}

/* Fills the header of a new bucket of this id. */
void kv_bkt_header_fill(struct kv_bucket_hdr *h, uint64_t id)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	h->bh_magic = KV_BUCKET_MAGIC;
	h->bh_version = KV_FORMAT_VERSION;
	h->bh_id = id;
	h->bh_created_ns = ts.tv_sec * 1000000000ll + ts.tv_nsec;
	h->bh_csum = XXH3_64bits(h, sizeof(*h));
}

/*
 * Builds the head block of a put, with its chunk checksums (also into
 * bp_csums when given): *head is the block (4 KiB aligned, malloc'ed) and
 * its length. Returns 0 or -ENOMEM.
 */
int kv_bkt_head_build(struct kv_bucket_put *p, struct iovec *head)
{
	uint32_t head_len = kv_rec_head_len(p->bp_key_len, p->bp_len);
	struct kv_rec_head h = {
	    .rh_magic = KV_REC_MAGIC,
	    .rh_version = KV_FORMAT_VERSION,
	    .rh_flags = p->bp_flags,
	    .rh_ext_index = p->bp_index,
	    .rh_key_len = p->bp_key_len,
	    .rh_head_len = head_len,
	    .rh_value_len = p->bp_len,
	    .rh_seq = p->bp_seq,
	    .rh_chunk_shift = KV_CHUNK_SHIFT,
	    .rh_nchunks = (uint32_t)((p->bp_len + CHUNK - 1) / CHUNK),
	};
	char *buf = kv_bkt_aligned(head_len), *key, *csums;
	int err;

	if (!buf)
		return -ENOMEM;
	key = buf + sizeof(h);
	csums = key + p->bp_key_len;
	memcpy(key, p->bp_key, p->bp_key_len);
	if (h.rh_nchunks) {
		uint64_t *tmp = malloc((size_t)h.rh_nchunks * 8);

		err = tmp ? chunk_csums(p->bp_iov, p->bp_iovcnt, p->bp_len, tmp) : -ENOMEM;
		if (err) {
			free(tmp);
			free(buf);
			return err;
		}
		memcpy(csums, tmp, (size_t)h.rh_nchunks * 8);
		if (p->bp_csums)
			memcpy(p->bp_csums, tmp, (size_t)h.rh_nchunks * 8);
		free(tmp);
	}
	h.rh_payload_csum = XXH3_64bits(csums, (size_t)h.rh_nchunks * 8);
	h.rh_head_csum = head_csum(&h, sizeof(h), key, csums);
	memcpy(buf, &h, sizeof(h));
	*head = (struct iovec){.iov_base = buf, .iov_len = head_len};
	return 0;
}

/*
 * Bytes of an index entry in a bucket of `version`: a version 1 bucket
 * (recovered open) gets version 1 entries, the first 32 bytes.
 */
static size_t idx_ent_len(uint16_t version)
{
	return version == 1 ? offsetof(struct kv_idx_ent, ie_ext_index) : sizeof(struct kv_idx_ent);
}

/* Bytes of the index block of a bucket of `version` with records idx[0..n). */
uint64_t kv_bkt_index_len(const struct kv_bkt_idx_rec *idx, uint64_t n, uint16_t version)
{
	size_t elen = idx_ent_len(version);
	uint64_t ilen = 0;

	for (uint64_t i = 0; i < n; i++)
		ilen += elen + (idx[i].ir_ent.ie_key_len + 7) / 8 * 8;
	return ilen;
}

/* Writes the index block of records idx[0..n) to buf (kv_bkt_index_len bytes, zeroed). */
void kv_bkt_index_encode(char *buf, const struct kv_bkt_idx_rec *idx, uint64_t n, uint16_t version)
{
	size_t elen = idx_ent_len(version);
	uint64_t off = 0;

	for (uint64_t i = 0; i < n; i++) {
		const struct kv_bkt_idx_rec *r = &idx[i];

		memcpy(buf + off, &r->ir_ent, elen);
		memcpy(buf + off + elen, r->ir_key, r->ir_ent.ie_key_len);
		off += elen + (r->ir_ent.ie_key_len + 7) / 8 * 8;
	}
}

/* Fills the trailer of bucket id whose index block (index_len bytes at index) is at index_off. */
void kv_bkt_trailer_fill(struct kv_bucket_trailer *t, uint64_t id, uint64_t index_off,
			 const void *index, uint64_t index_len, uint64_t count)
{
	*t = (struct kv_bucket_trailer){
	    .bt_magic = KV_TRAILER_MAGIC,
	    .bt_id = id,
	    .bt_index_off = index_off,
	    .bt_index_len = index_len,
	    .bt_count = count,
	    .bt_index_csum = XXH3_64bits(index, index_len),
	};
	t->bt_csum = XXH3_64bits(t, sizeof(*t));
}

/* Whether t is a whole trailer of bucket id, in a file of `size` bytes. */
bool kv_bkt_trailer_ok(const struct kv_bucket_trailer *t, uint64_t id, uint64_t size)
{
	struct kv_bucket_trailer c = *t;

	c.bt_csum = 0;
	return t->bt_magic == KV_TRAILER_MAGIC && t->bt_id == id &&
	       XXH3_64bits(&c, sizeof(c)) == t->bt_csum && t->bt_index_off <= size;
}
