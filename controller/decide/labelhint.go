package decide

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// closestLabels finds, for a selector that matches no pod, the label sets on pods that come
// closest to it: for each pod, the selector's pairs matched to the pod's nearest labels by
// edit distance on key and value. It returns the nearest sets (rendered like the selector)
// with how many pods carry each, most common first, or nil when no pod is near enough to be a
// plausible typo.
func closestLabels(selector map[string]string, pods []map[string]string) []labelHint {
	best := -1
	count := map[string]int{}
	for _, podLabels := range pods {
		d, set := nearest(selector, podLabels)
		if set == "" {
			continue
		}
		switch {
		case best < 0 || d < best:
			best = d
			clear(count)
			count[set] = 1
		case d == best:
			count[set]++
		}
	}
	// Further than this and the "closest" labels are just other labels, not a near miss.
	if best < 0 || best > max(3, len(renderLabels(selector))/2) {
		return nil
	}
	hints := make([]labelHint, 0, len(count))
	for set, n := range count {
		hints = append(hints, labelHint{Labels: set, Pods: n})
	}
	sort.Slice(hints, func(i, j int) bool {
		if hints[i].Pods != hints[j].Pods {
			return hints[i].Pods > hints[j].Pods
		}
		return hints[i].Labels < hints[j].Labels
	})
	return hints
}

// labelHint is a label set found on pods near a selector.
type labelHint struct {
	Labels string // "app=gitea"
	Pods   int
}

func (h labelHint) String() string {
	if h.Pods == 1 {
		return "1 pod has " + h.Labels
	}
	return fmt.Sprintf("%d pods have %s", h.Pods, h.Labels)
}

// nearest pairs every selector label with the pod's closest label and returns the summed
// distance and the pod's labels so chosen, rendered in the selector's key order. It returns
// "" when the pod has no labels.
func nearest(selector, podLabels map[string]string) (int, string) {
	if len(podLabels) == 0 {
		return 0, ""
	}
	total := 0
	chosen := map[string]string{}
	for _, k := range slices.Sorted(maps.Keys(selector)) {
		v := selector[k]
		bestD, bestK := -1, ""
		for _, pk := range slices.Sorted(maps.Keys(podLabels)) {
			d := editDistance(k, pk) + editDistance(v, podLabels[pk])
			if bestD < 0 || d < bestD {
				bestD, bestK = d, pk
			}
		}
		total += bestD
		chosen[bestK] = podLabels[bestK]
	}
	return total, renderLabels(chosen)
}

// renderLabels prints a label set as a selector: "app=gitea,tier=web", keys sorted.
func renderLabels(set map[string]string) string {
	parts := make([]string, 0, len(set))
	for _, k := range slices.Sorted(maps.Keys(set)) {
		parts = append(parts, k+"="+set[k])
	}
	return strings.Join(parts, ",")
}

// editDistance is the Levenshtein distance between a and b, in bytes (label keys and values
// are ASCII).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
