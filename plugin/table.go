package plugin

import (
	"fmt"
	"io"
	"math/big"
	"strings"
	"text/tabwriter"
)

// Table writes aligned columns, as kubectl get does.
func Table(out io.Writer, header ...string) *tabwriter.Writer {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	return tw
}

// Row writes one row of a Table.
func Row(tw io.Writer, cells ...any) {
	s := make([]string, len(cells))
	for i, c := range cells {
		s[i] = fmt.Sprint(c)
		if s[i] == "" {
			s[i] = "-"
		}
	}
	fmt.Fprintln(tw, strings.Join(s, "\t"))
}

// UsageBar draws used out of used+free as a bar of width cells with the percentage:
// "[#####...............]  25%". free is a decimal (pools can hold 2^64 addresses).
func UsageBar(used int64, free string, width int) string {
	f, ok := new(big.Int).SetString(free, 10)
	if !ok {
		return "-"
	}
	total := new(big.Int).Add(f, big.NewInt(used))
	if total.Sign() == 0 {
		return "[" + strings.Repeat(".", width) + "]    -"
	}
	// Round up, so one address used never shows as an empty bar.
	cells := ceilDiv(new(big.Int).Mul(big.NewInt(used), big.NewInt(int64(width))), total).Int64()
	pct := ceilDiv(new(big.Int).Mul(big.NewInt(used), big.NewInt(100)), total).Int64()
	return fmt.Sprintf("[%s%s] %3d%%", strings.Repeat("#", int(cells)), strings.Repeat(".", width-int(cells)), pct)
}

func ceilDiv(a, b *big.Int) *big.Int {
	q, r := new(big.Int).QuoRem(a, b, new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q
}
