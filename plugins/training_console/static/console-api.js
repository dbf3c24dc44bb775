// Reading and calling: the plugin's API (/training-jobs/api) and Airflow's REST API (/api/v2), both authenticated by
// the Airflow UI's session cookie. A JSON body on every call: web_boundary.py refuses a state-changing request without.
import {ROOT} from "./console-util.js";

export async function api(path, options = {}) {
  const response = await fetch(path, {credentials: "same-origin", headers: {"Content-Type": "application/json", Accept: "application/json"}, ...options});
  const text = await response.text();
  let body; try { body = text ? JSON.parse(text) : {}; } catch (e) { body = {detail: text}; }
  const refused = typeof body.detail === "string" && body.detail.startsWith("refused: ");  // web_boundary.py's guard
  if (response.status === 401 || (response.status === 403 && !refused)) throw new Error("Not logged in to Airflow (or no access): log in at " + ROOT + "/ and come back.");
  if (!response.ok) throw new Error(`${response.status}: ${typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail ?? body)}`);
  return body;
}
