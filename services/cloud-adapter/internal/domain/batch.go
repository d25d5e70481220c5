package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// MaxClientTokenLen is the longest ClientToken we send. Tencent CVM accepts
// 64 ASCII characters; other clouds accept at least as many.
const MaxClientTokenLen = 64

// Chunk is a contiguous slice [Start, End) of a batch's instances that one
// cloud call creates, with the ClientToken of that call.
type Chunk struct {
	Index      int
	Start, End int
	Token      string
}

// Len is the number of instances in the chunk.
func (c Chunk) Len() int { return c.End - c.Start }

// SplitBatch splits a batch of n instances into chunks of at most max, in
// order. A batch that fits in one call keeps its token unchanged; the chunks
// of a bigger batch get tokens derived from it, so a redelivered command
// splits the same way and every call is idempotent on its own.
func SplitBatch(token string, n, max int) []Chunk {
	if n <= 0 || max <= 0 {
		return nil
	}
	count := (n + max - 1) / max
	chunks := make([]Chunk, 0, count)
	for i := range count {
		end := min((i+1)*max, n)
		chunks = append(chunks, Chunk{Index: i, Start: i * max, End: end, Token: ChunkToken(token, i, count)})
	}
	return chunks
}

// ChunkToken returns the ClientToken of chunk i of count. With one chunk it
// is token itself; otherwise "<token>-<i>", or a digest of the token when
// that would exceed MaxClientTokenLen.
func ChunkToken(token string, i, count int) string {
	if count <= 1 {
		return token
	}
	suffix := "-" + strconv.Itoa(i)
	if len(token)+len(suffix) <= MaxClientTokenLen {
		return token + suffix
	}
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])[:MaxClientTokenLen-len(suffix)] + suffix
}
