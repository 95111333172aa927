// After `tsc -p tsconfig.cjs.json`: marks dist/cjs as CommonJS (the package itself is "type": "module"),
// so that require("@kagent-fork/client") (kagent's jest, any CommonJS caller) loads dist/cjs/index.js.

import { writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const dist = join(dirname(fileURLToPath(import.meta.url)), "..", "dist", "cjs");
writeFileSync(join(dist, "package.json"), JSON.stringify({ type: "commonjs" }) + "\n");
