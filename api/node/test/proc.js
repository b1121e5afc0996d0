// Child processes of the tests: the examples, npm and tsc.
import { spawn } from "node:child_process";

/**
 * Starts a command and collects its output; waitFor resolves once a line
 * of stdout matches.
 * @param {string} cmd
 * @param {string[]} args
 * @param {{ cwd?: string, env?: Record<string, string | undefined> }} [options]
 */
export function start(cmd, args, options = {}) {
  const child = spawn(cmd, args, { cwd: options.cwd, env: { ...process.env, ...options.env }, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  /** @type {(() => void)[]} */
  const watchers = [];
  child.stdout.setEncoding("utf8").on("data", (d) => {
    stdout += d;
    for (const w of watchers) w();
  });
  child.stderr.setEncoding("utf8").on("data", (d) => (stderr += d));
  const exited = new Promise((resolve) => child.on("close", (code, signal) => resolve({ code, signal })));
  exited.then(() => {
    for (const w of watchers) w();
  });
  let done = false;
  exited.then(() => (done = true));
  return {
    child,
    exited,
    get stdout() {
      return stdout;
    },
    get stderr() {
      return stderr;
    },
    /** Resolves with the first line of stdout matching re. */
    waitFor(re, timeoutMs = 30_000) {
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`no line matching ${re} within ${timeoutMs} ms\nstdout:\n${stdout}\nstderr:\n${stderr}`)), timeoutMs);
        const check = () => {
          const line = stdout.split("\n").find((l) => re.test(l));
          if (line !== undefined) {
            clearTimeout(timer);
            resolve(line);
          } else if (done) {
            clearTimeout(timer);
            reject(new Error(`exited without a line matching ${re}\nstdout:\n${stdout}\nstderr:\n${stderr}`));
          }
        };
        watchers.push(check);
        check();
      });
    },
    async stop() {
      if (!done) child.kill("SIGTERM");
      return exited;
    },
  };
}

/**
 * Runs a command to its end; rejects unless it exits 0.
 * @returns {Promise<{ stdout: string, stderr: string }>}
 */
export async function run(cmd, args, options = {}) {
  const p = start(cmd, args, options);
  const { code, signal } = await p.exited;
  if (code !== 0) throw new Error(`${cmd} ${args.join(" ")}: exit ${code ?? signal}\nstdout:\n${p.stdout}\nstderr:\n${p.stderr}`);
  return { stdout: p.stdout, stderr: p.stderr };
}
