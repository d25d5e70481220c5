package messaging

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// BucketOfferings holds the offerings cloud adapters found out of
// capacity: one cloudv1.OfferingUnavailable per key (OfferingKey), skipped
// by every adapter replica until its `until`. Readers ignore a mark whose
// `until` has passed; the bucket's MaxAge only bounds how long an expired
// mark stays stored.
const BucketOfferings = "nodesmith_offerings"

// OfferingsMaxAge is how long a mark is kept in BucketOfferings, whatever
// its `until` (longer than any sensible unavailability TTL).
const OfferingsMaxAge = 24 * time.Hour

// OfferingKey is the key of an offering's mark in BucketOfferings: one key
// per cloud account, region, zone, instance type and capacity type (a
// stock-out is not per subnet). The fields are hashed so any zone or type
// name makes a valid key; the value names them.
func OfferingKey(provider, account, region, zone, instanceType, capacityType string) string {
	h := sha256.Sum256([]byte(strings.Join([]string{provider, account, region, zone, instanceType, capacityType}, "\x00")))
	return "o" + hex.EncodeToString(h[:16])
}
