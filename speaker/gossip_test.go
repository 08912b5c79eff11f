package speaker

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMemberlistKeys: secretkey encrypts, each line of acceptedkeys also decrypts; a missing
// or malformed key is an error naming the Secret.
func TestMemberlistKeys(t *testing.T) {
	const k16, k32 = "0123456789abcdef", "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		name     string
		data     map[string]string
		accepted int    // keys accepted besides the primary
		err      string // "" when valid
	}{
		{"primary only", map[string]string{"secretkey": k32}, 0, ""},
		{"accepted lines", map[string]string{"secretkey": k32, "acceptedkeys": k16 + "\n" + k32 + "\n"}, 2, ""},
		{"no primary", map[string]string{"acceptedkeys": k16}, 0, `has no key "secretkey"`},
		{"short primary", map[string]string{"secretkey": "short"}, 0, "key 1 of 1 is 5 bytes"},
		{"short accepted", map[string]string{"secretkey": k16, "acceptedkeys": k32 + "\nshort"}, 0, "key 3 of 3 is 5 bytes"},
	} {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "portico-system", Name: "portico-memberlist"}, Data: map[string][]byte{}}
		for k, v := range tc.data {
			sec.Data[k] = []byte(v)
		}
		keys, err := MemberlistKeys(sec)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.err == "" && len(keys.Accepted) != tc.accepted:
			t.Errorf("%s: %d accepted keys, want %d", tc.name, len(keys.Accepted), tc.accepted)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "portico-system/portico-memberlist")):
			t.Errorf("%s: error %v, want one with %q naming the Secret", tc.name, err, tc.err)
		}
	}
}
