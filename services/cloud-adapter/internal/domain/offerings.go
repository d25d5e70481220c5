package domain

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

// Offering is one place a create command's VMs may be created (the mirror
// of cloud.v1.Offering): a zone, the subnet there ("" for the template
// parameters'), an instance type and a capacity type. Lifecycle sends a
// command's offerings with the capacity type resolved (libs/cloudspec
// Offering.WithCapacity), so marks and metrics name them as they come.
type Offering struct {
	Zone         string
	SubnetID     string
	InstanceType string
	CapacityType string
}

// OfferingMark says that an offering ran out of capacity in a target: the
// cloud adapters skip it until Until.
type OfferingMark struct {
	Target   Target
	Offering Offering
	At       time.Time
	Until    time.Time
	// Reason is the cloud's answer that marked it.
	Reason *CloudError
}

// Live reports whether the mark still holds at now.
func (m OfferingMark) Live(now time.Time) bool { return now.Before(m.Until) }

// offeringTokenPrefix starts every derived offering token, so a token
// tells at a glance that it is one.
const offeringTokenPrefix = "o-"

// OfferingToken returns the ClientToken of one create call on an
// offering: chunkToken is the token of the batch's chunk (SplitBatch),
// instanceID is "" for the chunk's call and the instance's id for the call
// that relaunches one instance whose VM failed to launch. The token is a
// digest of all of them (every field of the offering included), so it is
// the same on every delivery of the command (the cloud returns the VMs of
// the first call instead of creating more), differs between offerings,
// chunks and relaunched instances, and is MaxClientTokenLen ASCII
// characters long whatever the inputs' length.
func OfferingToken(chunkToken string, o Offering, instanceID string) string {
	h := sha256.New()
	for _, part := range []string{chunkToken, o.Zone, o.SubnetID, o.InstanceType, o.CapacityType, instanceID} {
		// Length-prefixed parts: no two different inputs concatenate alike.
		var n [8]byte
		l := uint64(len(part))
		for i := range n {
			n[i] = byte(l >> (8 * i))
		}
		h.Write(n[:])
		h.Write([]byte(part))
	}
	sum := hex.EncodeToString(h.Sum(nil)) // 64 characters
	return offeringTokenPrefix + sum[:MaxClientTokenLen-len(offeringTokenPrefix)]
}
