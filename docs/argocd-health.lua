-- Argo CD health check for batch.tensorstack.dev/PyTorchTrainingJob (docs/gitops.md).
-- Reads only status.phase, status.observedGeneration and status.conditions:
--   no status yet, or a status of an older generation  -> Progressing
--   Succeeded                                           -> Healthy
--   Failed                                              -> Degraded (the Failed reason)
--   Paused                                              -> Suspended
--   a creation the apiserver keeps refusing (quota, policy: ReplicaFailure with
--   PodCreationFailed or ServiceCreationFailed)         -> Degraded, whatever the phase
--   Running                                             -> Healthy
--   Pending, Resuming                                   -> Progressing
local hs = {}
local status = obj.status
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "waiting for the reconciler to write the job's status"
  return hs
end

local conditions = {}
if status.conditions ~= nil then
  for _, c in ipairs(status.conditions) do
    if c.type ~= nil then
      conditions[c.type] = c
    end
  end
end

local function said(c, fallback)
  if c == nil then
    return fallback
  end
  local text = c.reason or ""
  if c.message ~= nil and c.message ~= "" then
    text = text .. ": " .. c.message
  end
  return text
end

local phase = status.phase
local generation = obj.metadata and obj.metadata.generation
local observed = status.observedGeneration
if phase ~= "Succeeded" and phase ~= "Failed" and generation ~= nil and observed ~= nil
    and observed < generation then
  hs.status = "Progressing"
  hs.message = "the status describes generation " .. observed .. ", the spec is " .. generation
  return hs
end

if phase == "Succeeded" then
  hs.status = "Healthy"
  hs.message = said(conditions["Completed"], "the job succeeded")
  return hs
end
if phase == "Failed" then
  hs.status = "Degraded"
  hs.message = said(conditions["Failed"], "the job failed")
  return hs
end

local failure = conditions["ReplicaFailure"]
if failure ~= nil and failure.status == "True" and
    (failure.reason == "PodCreationFailed" or failure.reason == "ServiceCreationFailed") then
  hs.status = "Degraded"
  hs.message = said(failure, "replicas cannot be created")
  return hs
end

if phase == "Paused" then
  hs.status = "Suspended"
  hs.message = said(conditions["Paused"], "the job is paused")
  return hs
end
if phase == "Running" then
  hs.status = "Healthy"
  if failure ~= nil and failure.status == "True" then
    hs.message = said(failure, "")
  else
    hs.message = said(conditions["Running"], "every replica is running")
  end
  return hs
end

hs.status = "Progressing"
if failure ~= nil and failure.status == "True" then
  hs.message = said(failure, "")
else
  hs.message = "the job is " .. string.lower(phase)
end
return hs
