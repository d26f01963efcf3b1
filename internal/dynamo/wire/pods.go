package wire

import (
	"encoding/json"
	"errors"
	"fmt"
)

// PodRecord is a worker found by the kubernetes_pods source: a ready pod of
// the fleet with the role its labels give and the model its configuration
// maps it to. Pods carry no card, so there is no capacity and no dp rank.
type PodRecord struct {
	Pod        string `json:"pod"`
	Component  string `json:"component"`
	Role       string `json:"role"`
	Model      string `json:"model"`
	InstanceID uint64 `json:"instance_id"`
}

// Encode returns the record's JSON.
func (p *PodRecord) Encode() []byte {
	b, _ := json.Marshal(p) // strings and a number: cannot fail
	return b
}

// ParsePodRecord parses a PodRecord.
func ParsePodRecord(b []byte) (*PodRecord, error) {
	var p PodRecord
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, err
	}
	if p.Pod == "" {
		return nil, errors.New("pod record without a pod name")
	}
	return &p, nil
}

// Refusal is a Kubernetes object a source refused as a whole, with the
// problem kind it is counted under (refused, mismatch, malformed).
type Refusal struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Reason    string `json:"reason"`
}

// Encode returns the refusal's JSON.
func (r *Refusal) Encode() []byte {
	b, _ := json.Marshal(r)
	return b
}

// ParseRefusal parses a Refusal.
func ParseRefusal(b []byte) (*Refusal, error) {
	var r Refusal
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, err
	}
	if r.Kind == "" {
		return nil, fmt.Errorf("refusal without a kind")
	}
	return &r, nil
}
