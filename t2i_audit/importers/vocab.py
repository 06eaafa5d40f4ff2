"""Closed word classes and attribute vocabularies of the importers' grammar (:mod:`.grammar`).

Attribute words are the benchmarks' own categories: T2I-CompBench's colour, shape (with its size
words) and texture prompts (``examples/dataset/{color,shape,texture}*.txt``), GenEval's ten
colours, plus common neutral and metallic names. A word listed here is always read as that
attribute, never as a noun, so "a black and white cat" has one reading. Users extend the lists
with a suite file (``--vocab``), as :func:`.t2i_compbench.concept_vocabulary` does.
"""

from __future__ import annotations

ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "color": ("red", "orange", "yellow", "green", "blue", "purple", "pink", "brown", "black", "white",
              "gray", "grey", "gold", "golden", "silver", "beige", "tan", "cream", "ivory", "navy", "teal",
              "turquoise", "cyan", "magenta", "maroon", "violet", "lavender", "bronze", "copper", "khaki",
              "crimson", "scarlet", "indigo", "burgundy", "amber"),
    "shape": ("round", "square", "rectangular", "triangular", "circular", "oval", "spherical", "cylindrical",
              "cubic", "conical", "pyramidal", "pentagonal", "hexagonal", "octagonal", "teardrop", "diamond",
              "crescent", "oblong", "heart-shaped", "star-shaped"),
    "size": ("big", "small", "large", "tiny", "huge", "giant", "little", "tall", "short", "long"),
    "texture": ("metallic", "fabric", "plastic", "wooden", "glass", "fluffy", "leather", "rubber", "furry",
                "fuzzy", "velvet", "silk", "woolen", "ceramic", "knitted"),
}
# which family wins when a word is listed in two (a file's own category wins over all of these)
FAMILY_ORDER = ("color", "shape", "size", "texture", "material")
SHADES = ("light", "dark", "pale", "bright", "deep")  # "light brown": one colour value, not two words

NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
           "nine": 9, "ten": 10}
ARTICLES = ("a", "an", "the")
POSSESSIVES = ("his", "her", "their", "its", "my", "our", "your")
COPULAS = ("is", "are", "was", "were")
# words that refer back or quantify: never an object name ("talking to each other", "running after it")
PRONOUNS = ("it", "them", "they", "he", "she", "him", "we", "us", "you", "i", "me", "each", "other", "another",
            "someone", "something", "everyone", "everything", "what", "which", "who", "that", "this", "these",
            "those", "there", "here", "itself", "themselves", "himself", "herself", "some",
            "all", "both", "every", "any", "no", "not", "as", "how", "where", "when", "then")

QUANTIFIERS = ("many", "several")  # determiners of a plural: "Many stoplights flash …"
# two-word nouns whose first word is an adjective: read as one noun ("two hot dogs" are no dogs)
COMPOUND_NOUNS = ("hot dog",)
RELATIVE_PRONOUNS = ("which",)  # "… a soda cup which are sitting on …" ("that" is also a determiner)
# words that join two clauses, each parsed on its own ("… sits between cupboards while sun shines …")
CLAUSE_CONJUNCTIONS = ("while",)

# Relation phrases: surface → (name, family, inverse). T2I-CompBench's 2-D phrases keep the meaning
# their UniDet_eval/2D_spatial_eval.py checks ("on the top of" = subject above object); 3-D ones
# (UniDet_eval/3D_spatial_eval.py) are family "depth" — it scores "hidden" like "behind" — so that
# scorers without depth can decline them by family or name instead of reading them as 2-D.
RELATIONS: dict[str, tuple[str, str, str | None]] = {
    "on the left of": ("left of", "spatial", "right of"), "on the right of": ("right of", "spatial", "left of"),
    "to the left of": ("left of", "spatial", "right of"), "to the right of": ("right of", "spatial", "left of"),
    "left of": ("left of", "spatial", "right of"), "right of": ("right of", "spatial", "left of"),
    "on the top of": ("above", "spatial", "below"), "on top of": ("above", "spatial", "below"),
    "on the bottom of": ("below", "spatial", "above"), "above": ("above", "spatial", "below"),
    "below": ("below", "spatial", "above"), "under": ("below", "spatial", "above"),
    "beneath": ("below", "spatial", "above"), "next to": ("next to", "spatial", "next to"),
    "near": ("next to", "spatial", "next to"), "on side of": ("next to", "spatial", "next to"),
    "beside": ("next to", "spatial", "next to"), "on": ("on", "spatial", None), "in": ("in", "spatial", None),
    "inside": ("in", "spatial", None),
    "in front of": ("in front of", "depth", "behind"), "behind": ("behind", "depth", "in front of"),
    "hidden by": ("hidden by", "depth", None),
}
# prepositions that start a complement of a verb but are no relation on their own
PREPOSITIONS = ("with", "for", "from", "into", "onto", "at", "by", "to", "through", "across", "along",
                "alongside", "past", "off", "around", "towards", "toward", "over", "against", "up", "down",
                "out", "among", "between", "before", "after", "during", "beyond", "underneath")
PARTICLES = ("up", "down", "out", "off", "away", "back", "over")
# verbs that take an object and a bare verb ("watching her child play"): with them "child play" is
# also a clause, so such a prompt is declined as ambiguous rather than given an object "child play"
SMALL_CLAUSE_VERBS = ("watch", "see", "hear", "feel", "notice", "observe", "let", "make", "help", "have")

# Everyday nouns the lexicon (lemminflect) lacks: without them "a brown log" has no noun. Singular
# forms; plurals come from inflect.
EXTRA_NOUNS = ("log", "gallery", "burger", "frisbee", "teddy", "keychain", "highlighter", "nightstand",
               "placemat", "lampshade", "ottoman", "windowsill", "bookend", "birdhouse", "candlestick",
               "hardcover", "locket", "topper", "sunglasses", "yo-yo", "cufflink", "paperclip", "skateboard",
               "smartphone", "laptop", "doorknob", "bathtub", "countertop", "backpack", "cupcake", "tiara",
               "bookstand", "gemstone", "toolset", "showerhead", "reflection", "archway", "christmas",
               "zookeeper", "woodcarver", "sashimi", "pipette", "lifejacket", "cocoa", "bonsai", "ballgown",
               "alleyway", "crafter", "top")  # "top": the lexicon has it only as adjective and verb ("counter tops")

# "a photo of …", "a close-up picture of …": the words that frame a prompt as a picture of a scene. A frame
# is no object of the scene: the grammar reads the scene after it, so no question asks about "the photo"
FRAMES = ("photo", "photograph", "picture", "image", "snapshot", "pic", "shot")
# verbs whose "<participle> by X" says where, not who ("a man sat by a tree", "a car parked by a fence"): no
# passive is read from them; the relation is asked as the whole prompt
LOCATIVE_BY_VERBS = ("sit", "stand", "lie", "lay", "wait", "park", "stop", "rest", "stay", "walk", "run", "pass",
                     "go", "lean", "place", "put", "set", "seat", "situate", "locate", "position", "leave", "hang",
                     "line", "perch", "gather", "stack", "pile", "sleep", "play", "stroll", "float", "fly")
