-- keyhole's hold protocol, generated from keyhole-core (core/src/proto/hold.rs and
-- core/src/proto/reply.rs). Do not edit: `KEYHOLE_BLESS=1 cargo test -p keyhole-core hold`
-- rewrites it, and a test fails while it differs.
local HOLD_HEADER = "x-keyhole-hold"
local HOLD_CLOSED = "closed"
local VERDICT_PATTERN = "^keyhole%-verdict (%d+) ?(.*)$"
local MAX_VERDICT_LINE = 65536
local NAMES_HEADER = "x-keyhole-off-surface"
local EDIT_REMOVE = "-"
local EDIT_ADD = "+"
local EDIT_PATTERN = "^(:?[%w_%-]+)%: (.*)$"
local CONTENT_TYPE = "application/json"
local KEPT = { [":status"] = true, ["server"] = true, ["x-envoy-upstream-service-time"] = true }
local WITHHELD_STATUS = "502"
local WITHHELD = "{\"type\":\"error\",\"error\":{\"type\":\"keyhole_unaliasable_response\",\"code\":502,\"message\":\"keyhole withheld this response: it carried no valid verdict\"}}"
local REFUSED_STATUS = "500"
local REFUSED = "{\"type\":\"error\",\"error\":{\"type\":\"keyhole_internal\",\"code\":500,\"message\":\"keyhole could not rewrite this request; it was not sent\"}}"
