package benchproc

import (
	"slices"
	"strconv"
	"strings"
)

// Median is the median of vs (the mean of the middle two for an even
// count); 0 for none. vs is not changed.
func Median(vs []float64) float64 {
	s := slices.Clone(vs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// TwoPlaces writes v with two decimals.
func TwoPlaces(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

// OneOrNone writes v with one decimal below 100, else as Grouped does.
func OneOrNone(v float64) string {
	if v >= 100 {
		return Grouped(v)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

// Grouped rounds v to a whole number written with thousands separators.
func Grouped(v float64) string {
	s := strconv.FormatFloat(v, 'f', 0, 64)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
