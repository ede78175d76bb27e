/** A backend a Galley server registers: the config's `backend` value, and what it loads models with. */
export interface GalleyBackend {
  /** The config's `backend` (`platform` pairs with it as in Triton, PROTOCOL.md §3.12). */
  readonly name: string;
  /**
   * The library the backend needs that a Galley install may lack; absent when it needs none.
   * Without it the server still starts, and loads of this backend's models fail saying so.
   */
  readonly needs?: string;
  /**
   * Set where the backend also has a Python-based runtime (Triton's `backends/<name>/model.py`,
   * picked by `runtime: "model.py"`): what that runtime needs.
   */
  readonly pythonBased?: string;
}

/**
 * Every backend a Galley server has, the one list both sides read: `galley config validate`
 * accepts these names, and the server's test fails if it registers a backend missing here, or
 * lacks one listed here.
 */
export const GALLEY_BACKENDS: readonly GalleyBackend[] = [
  { name: "js" },
  { name: "onnxruntime", needs: "onnxruntime-node" },
  { name: "python", needs: "python3 with numpy" },
  {
    name: "pytorch",
    needs: "libtorch, through the torch addon of @galley/backends-native",
    pythonBased: "python3 with numpy and torch 2.x",
  },
];

/** The names of {@link GALLEY_BACKENDS}. */
export const GALLEY_BACKEND_NAMES: ReadonlySet<string> = new Set(GALLEY_BACKENDS.map((b) => b.name));

/** The backends of {@link GALLEY_BACKENDS} with a Python-based runtime (`runtime: "model.py"`). */
export const GALLEY_PYTHON_BASED_BACKENDS: ReadonlySet<string> = new Set(
  GALLEY_BACKENDS.filter((b) => b.pythonBased !== undefined).map((b) => b.name),
);
