-- Reading and applying a verdict line (grammar: core/src/proto/hold.rs), shared by
-- both hold filters. Needs the constants of keyhole_hold_protocol.lua.

-- The verdict at the start of `body`, or nil when there is none; and the
-- body's size. A verdict is { status = "0", names = "a,b", fields = {...},
-- length = bytes of the line, "\n" included }.
local function read_verdict(body)
  local size = 0
  if body ~= nil then size = body:length() end
  local head = ""
  if size > 0 then head = body:getBytes(0, math.min(size, MAX_VERDICT_LINE)) end
  local nl = string.find(head, "\n", 1, true)
  if nl == nil then return nil, size end
  local fields = {}
  for field in string.gmatch(string.sub(head, 1, nl - 1), "[^\t]+") do
    fields[#fields + 1] = field
  end
  if fields[1] == nil then return nil, size end
  local status, names = string.match(fields[1], VERDICT_PATTERN)
  if status == nil then return nil, size end
  return { status = status, names = names, fields = fields, length = nl }, size
end

-- Removes the verdict line from the body and fixes content-length.
local function strip_verdict(headers, body, verdict, size)
  local nl = verdict.length
  if size > nl then
    body:setBytes(body:getBytes(nl, size - nl))
  else
    body:setBytes("")
  end
  headers:replace("content-length", tostring(size - nl))
end

-- Applies the verdict's header edits in order: `name: value` sets, `-name`
-- removes, `+name: value` adds one more value (a repeated header).
local function apply_edits(headers, verdict)
  for i = 2, #verdict.fields do
    local field = verdict.fields[i]
    local mark = string.sub(field, 1, 1)
    if mark == EDIT_REMOVE then
      headers:remove(string.sub(field, 2))
    elseif mark == EDIT_ADD then
      local name, value = string.match(string.sub(field, 2), EDIT_PATTERN)
      if name ~= nil then headers:add(name, value) end
    else
      local name, value = string.match(field, EDIT_PATTERN)
      if name ~= nil then headers:replace(name, value) end
    end
  end
end
