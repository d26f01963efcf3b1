package testutil

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// DynamoFixture is a file under testdata/dynamo: etcd-shaped events in, the
// fleet view out.
type DynamoFixture struct {
	Description string        `yaml:"description"`
	Events      []DynamoEvent `yaml:"events"`
	Want        DynamoWant    `yaml:"want"`
	Then        *struct {
		Events []DynamoEvent `yaml:"events"`
		Want   DynamoWant    `yaml:"want"`
	} `yaml:"then"`
}

// DynamoEvent is one put (value as YAML, or raw text), delete or resync mark.
type DynamoEvent struct {
	Put         string         `yaml:"put"`
	Delete      string         `yaml:"delete"`
	Value       map[string]any `yaml:"value"`
	Raw         *string        `yaml:"raw"`
	ResyncBegin bool           `yaml:"resync_begin"`
	ResyncEnd   bool           `yaml:"resync_end"`
}

// Bytes is the value of a put event as it would stand in etcd.
func (e DynamoEvent) Bytes(t testing.TB) []byte {
	t.Helper()
	if e.Raw != nil {
		return []byte(*e.Raw)
	}
	b, err := json.Marshal(e.Value)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// DynamoWant is the expected view: workers and publishers in the admin JSON
// shape (fields left out take their defaults), problems by kind and keys.
type DynamoWant struct {
	Workers    []map[string]any `yaml:"workers"`
	Publishers []map[string]any `yaml:"publishers"`
	Problems   []struct {
		Kind string   `yaml:"kind"`
		Keys []string `yaml:"keys"`
	} `yaml:"problems"`
}

// LoadDynamoFixture reads and strictly decodes a fixture.
func LoadDynamoFixture(t testing.TB, path string) *DynamoFixture {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var fx DynamoFixture
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&fx); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &fx
}
