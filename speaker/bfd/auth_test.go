package bfd

import (
	"fmt"
	"strings"
	"testing"
)

// TestKeyNeverPrinted: a Config holding a key, printed in every format a log line or an error
// might use, never shows the key.
func TestKeyNeverPrinted(t *testing.T) {
	cfg := Config{DetectMult: 3, Auth: Auth{Type: AuthKeyedSHA1, KeyID: 1, Key: "hunter2-bfd-key"}}
	for _, format := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(format, cfg); strings.Contains(out, "hunter2") {
			t.Errorf("%s prints the key: %s", format, out)
		}
	}
}
