// A job as OpenAI's video object (the videos API's answers, its event streams and webhooks).
import type { Job } from "./job.js";

/** OpenAI's video object, with Galley's `cancelled`, `queue_position`, `frames` and `steps`. */
export interface VideoObject {
  id: string;
  object: "video";
  model: string;
  status: Job["status"];
  progress: number;
  created_at: number;
  completed_at: number | null;
  expires_at: number;
  size: string;
  seconds: string;
  frames: number;
  steps: number;
  prompt: string;
  priority: Job["priority"];
  error: { code: string; message: string } | null;
  /** Jobs served before this one, while it is queued. */
  queue_position?: number;
}

/** The video object of `job` (`fps` turns frames into seconds). */
export function videoObject(job: Job, fps: number, queuePosition?: number): VideoObject {
  const video: VideoObject = {
    id: job.id,
    object: "video",
    model: job.model,
    status: job.status,
    progress: job.status === "completed" ? 100 : job.progress,
    created_at: job.createdAt,
    completed_at: job.completedAt ?? null,
    expires_at: job.expiresAt,
    size: job.size,
    seconds: String(Math.round((job.frames / fps) * 100) / 100),
    frames: job.frames,
    steps: job.steps,
    prompt: job.prompt,
    priority: job.priority,
    error: job.error ?? null,
  };
  if (queuePosition !== undefined) video.queue_position = queuePosition;
  return video;
}
