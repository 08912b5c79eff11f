// A module that calls a known-vulnerable function (GO-2021-0113, golang.org/x/text/language
// before v0.3.7), so the vulnerability check can be seen to fail.
module example.com/vulnerable

go 1.26.0

require golang.org/x/text v0.3.6
