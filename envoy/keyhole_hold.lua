-- keyhole's response hold (protocol: core/src/proto/hold.rs). A wasm filter can
-- neither pause response headers (that stops its own body callbacks) nor
-- change them from a body callback. When keyhole marks a response (the hold
-- header), this filter keeps the headers until the body is complete, then
-- applies keyhole's verdict, which keyhole put in the body's first line.
-- Hold value "closed" (HMS): a body without a valid verdict is replaced by a
-- 502 and every header but a safe few is dropped, since it may hold raw ids.

local function withhold(headers, body)
  local drop = {}
  for name, _ in pairs(headers) do
    if not KEPT[name] then drop[#drop + 1] = name end
  end
  for _, name in ipairs(drop) do headers:remove(name) end
  headers:replace(":status", WITHHELD_STATUS)
  if body == nil then
    headers:replace("content-length", "0")
    return
  end
  body:setBytes(WITHHELD)
  headers:replace("content-type", CONTENT_TYPE)
  headers:replace("content-length", tostring(string.len(WITHHELD)))
end

function envoy_on_response(handle)
  local mode = handle:headers():get(HOLD_HEADER)
  if mode == nil then return end
  handle:headers():remove(HOLD_HEADER)
  local body = handle:body()
  -- body() yields: header handles taken before it are stale.
  local headers = handle:headers()
  local verdict, size = read_verdict(body)
  if verdict == nil then
    if mode == HOLD_CLOSED then withhold(headers, body) end
    return
  end
  strip_verdict(headers, body, verdict, size)
  if verdict.names ~= "" then headers:replace(NAMES_HEADER, verdict.names) end
  apply_edits(headers, verdict)
  if verdict.status ~= "0" then
    headers:replace(":status", verdict.status)
    headers:replace("content-type", CONTENT_TYPE)
  end
end
