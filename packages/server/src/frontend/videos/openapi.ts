// The videos API's OpenAPI 3.1 document, served at OPENAPI_PATH.

/** Where the document is served. */
export const OPENAPI_PATH = "/v1/openapi.json";

const error = { $ref: "#/components/responses/Error" };
const id = {
  name: "video_id",
  in: "path",
  required: true,
  schema: { type: "string", pattern: "^video_[0-9a-f]{32}$" },
};
const video = { "application/json": { schema: { $ref: "#/components/schemas/Video" } } };

/** The document (a fresh object each call). */
export function openApiDocument(): Record<string, unknown> {
  return {
    openapi: "3.1.0",
    info: {
      title: "Galley videos API",
      version: "1",
      description: "Asynchronous video generation jobs in OpenAI's Videos API shape (docs/guides/videos-api.md).",
    },
    security: [{}, { bearer: [] }],
    paths: {
      "/v1/videos": {
        post: {
          operationId: "createVideo",
          parameters: [
            { name: "Idempotency-Key", in: "header", schema: { type: "string", minLength: 1, maxLength: 255 } },
          ],
          requestBody: {
            required: true,
            content: { "application/json": { schema: { $ref: "#/components/schemas/CreateVideo" } } },
          },
          responses: {
            200: {
              description: "The queued video (or, for a repeated Idempotency-Key, the first one).",
              content: video,
            },
            400: error,
            401: error,
            404: error,
            409: error,
            429: error,
          },
        },
        get: {
          operationId: "listVideos",
          parameters: [
            { name: "limit", in: "query", schema: { type: "integer", minimum: 1, maximum: 100, default: 20 } },
            { name: "after", in: "query", schema: { type: "string" } },
            { name: "order", in: "query", schema: { type: "string", enum: ["asc", "desc"], default: "desc" } },
          ],
          responses: {
            200: {
              description: "A page of the caller's videos.",
              content: {
                "application/json": {
                  schema: {
                    type: "object",
                    properties: {
                      object: { const: "list" },
                      data: { type: "array", items: { $ref: "#/components/schemas/Video" } },
                      first_id: { type: ["string", "null"] },
                      last_id: { type: ["string", "null"] },
                      has_more: { type: "boolean" },
                    },
                  },
                },
              },
            },
            400: error,
            401: error,
          },
        },
      },
      "/v1/videos/{video_id}": {
        parameters: [id],
        get: {
          operationId: "retrieveVideo",
          responses: { 200: { description: "The video.", content: video }, 404: error },
        },
        delete: {
          operationId: "deleteVideo",
          description: "Cancels a queued or running video (answering it, status cancelled) or deletes a finished one.",
          responses: {
            200: { description: "The cancelled video, or {id, object: video.deleted, deleted: true}." },
            404: error,
          },
        },
      },
      "/v1/videos/{video_id}/content": {
        parameters: [
          id,
          {
            name: "variant",
            in: "query",
            schema: { type: "string", enum: ["video", "thumbnail", "preview"], default: "video" },
          },
        ],
        get: {
          operationId: "downloadVideoContent",
          responses: {
            200: {
              description: "video: MP4 (ffmpeg) or GIF; thumbnail and preview: PNG.",
              content: { "video/mp4": {}, "image/gif": {}, "image/png": {} },
            },
            400: error,
            404: error,
          },
        },
      },
      "/v1/videos/{video_id}/events": {
        parameters: [id],
        get: {
          operationId: "videoEvents",
          description:
            "Server-Sent Events: `video` (the video object on each change), `progress`, `preview` (a link to the latest preview); ends after the final status.",
          responses: {
            200: { description: "An event stream.", content: { "text/event-stream": {} } },
            404: error,
            429: error,
          },
        },
      },
    },
    components: {
      securitySchemes: { bearer: { type: "http", scheme: "bearer" } },
      responses: {
        Error: {
          description: "An error.",
          content: {
            "application/json": {
              schema: {
                type: "object",
                properties: {
                  error: {
                    type: "object",
                    properties: {
                      message: { type: "string" },
                      type: { type: "string" },
                      param: { type: ["string", "null"] },
                      code: { type: "string" },
                    },
                  },
                },
              },
            },
          },
        },
      },
      schemas: {
        CreateVideo: {
          type: "object",
          required: ["model", "prompt"],
          additionalProperties: false,
          properties: {
            model: { type: "string" },
            prompt: { type: "string" },
            size: {
              type: "string",
              pattern: "^[1-9][0-9]*x[1-9][0-9]*$",
              description: "WIDTHxHEIGHT, one of the model's sizes.",
            },
            seconds: {
              type: ["string", "number"],
              description: "Length; frames = seconds x the model's fps. Not with frames.",
            },
            frames: { type: "integer", minimum: 1 },
            steps: { type: "integer", minimum: 1 },
            seed: { type: "integer", minimum: 0, maximum: 2147483647 },
            priority: { type: "string", enum: ["high", "normal", "low"], default: "normal" },
            webhook_url: { type: "string", format: "uri" },
          },
        },
        Video: {
          type: "object",
          properties: {
            id: { type: "string" },
            object: { const: "video" },
            model: { type: "string" },
            status: { type: "string", enum: ["queued", "in_progress", "completed", "failed", "cancelled"] },
            progress: { type: "integer", minimum: 0, maximum: 100 },
            queue_position: { type: "integer", minimum: 0 },
            created_at: { type: "integer" },
            completed_at: { type: ["integer", "null"] },
            expires_at: { type: "integer" },
            size: { type: "string" },
            seconds: { type: "string" },
            frames: { type: "integer" },
            steps: { type: "integer" },
            prompt: { type: "string" },
            priority: { type: "string" },
            error: {
              oneOf: [
                { type: "null" },
                { type: "object", properties: { code: { type: "string" }, message: { type: "string" } } },
              ],
            },
          },
        },
      },
    },
  };
}
