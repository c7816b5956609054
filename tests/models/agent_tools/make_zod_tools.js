// Writes zod_tools.json: tool parameter schemas as zod-to-json-schema writes them (what the
// Vercel AI SDK and LangChain.js agents send). Made with zod 3 and zod-to-json-schema from
// the npm registry: `npm install zod@3 zod-to-json-schema && node make_zod_tools.js > zod_tools.json`.
const { z } = require("zod");
const { zodToJsonSchema } = require("zod-to-json-schema");
const tools = {
  get_weather: z.object({
    city: z.string().describe("City name"),
    unit: z.enum(["celsius", "fahrenheit"]).default("celsius"),
    days: z.number().int().min(1).max(14).optional(),
  }).describe("Weather forecast"),
  create_event: z.object({
    title: z.string().min(1).max(100),
    start: z.string().datetime(),
    attendees: z.array(z.string().email()).max(10).optional(),
    reminder_minutes: z.number().int().nonnegative().nullable(),
  }),
  search_products: z.object({
    query: z.string(),
    filters: z.object({
      min_price: z.number().positive().optional(),
      max_price: z.number().positive().optional(),
      category: z.union([z.literal("books"), z.literal("music"), z.literal("games")]).optional(),
    }).strict().optional(),
    sort: z.enum(["relevance", "price", "rating"]).optional(),
    limit: z.number().int().min(1).max(50).default(10),
  }),
  run_sql: z.object({
    statement: z.string().max(2000),
    params: z.array(z.union([z.string(), z.number(), z.boolean(), z.null()])).optional(),
    read_only: z.boolean().default(true),
  }),
  send_message: z.object({
    channel: z.string().regex(/^#[a-z0-9-]+$/),
    text: z.string().min(1),
    mentions: z.array(z.string().uuid()).optional(),
    priority: z.discriminatedUnion("level", [
      z.object({ level: z.literal("normal") }),
      z.object({ level: z.literal("urgent"), reason: z.string() }),
    ]).optional(),
  }),
  resize_image: z.object({
    url: z.string().url(),
    width: z.number().int().gt(0).lte(4096),
    height: z.number().int().gt(0).lte(4096),
    keep_aspect: z.boolean().optional(),
  }),
  shape_area: z.object({
    shape: z.discriminatedUnion("kind", [
      z.object({ kind: z.literal("circle"), radius: z.number().gt(0) }),
      z.object({ kind: z.literal("rectangle"), width: z.number().gt(0), height: z.number().gt(0) }),
    ]),
  }),
  set_tags: z.object({
    id: z.string().cuid().optional(),
    tags: z.array(z.string().min(1).max(20)).min(1).max(5),
    metadata: z.record(z.string(), z.union([z.string(), z.number()])).optional(),
  }),
};
const out = {};
for (const [name, schema] of Object.entries(tools)) {
  out[name] = zodToJsonSchema(schema, { target: "jsonSchema7" });
}
console.log(JSON.stringify(out, null, 1));
