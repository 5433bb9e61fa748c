-- keyhole's request hold (protocol: core/src/proto/hold.rs): a request with a body
-- leaves keyhole's request-headers callback before keyhole has read the body,
-- so keyhole cannot change its headers any more. When keyhole marks a request
-- (the hold header, set only by keyhole; it strips the header from clients),
-- this filter waits for the body, strips the verdict line keyhole put first,
-- and applies its header edits (the decoded :path). A marked request without
-- a valid verdict (status 0, no names) never reaches HMS.

function envoy_on_request(handle)
  if handle:headers():get(HOLD_HEADER) == nil then return end
  handle:headers():remove(HOLD_HEADER)
  local body = handle:body()
  -- body() yields: header handles taken before it are stale.
  local headers = handle:headers()
  local verdict, size = read_verdict(body)
  if verdict == nil or verdict.status ~= "0" or verdict.names ~= "" then
    handle:respond({[":status"] = REFUSED_STATUS, ["content-type"] = CONTENT_TYPE}, REFUSED)
    return
  end
  strip_verdict(headers, body, verdict, size)
  apply_edits(headers, verdict)
  handle:clearRouteCache()
end
