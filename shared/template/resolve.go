package template

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Parameter is one template parameter.
type Parameter struct {
	Type          string
	Default       string
	HasDefault    bool
	AllowedValues []string
	// MinValue and MaxValue bound Number parameters (nil: unbounded).
	MinValue, MaxValue *float64
}

// Resolver answers the intrinsic functions of a template for one
// deployment: the physical values of resources and parameters.
type Resolver interface {
	// Ref returns what !Ref id means: a parameter's value, a table's name,
	// a queue's URL, an API's id, a pseudo parameter (AWS::Region …).
	Ref(id string) (string, error)
	// GetAtt returns an attribute of a resource (Arn, QueueName …).
	GetAtt(id, attr string) (string, error)
}

var subVar = regexp.MustCompile(`\$\{([^}!]+)\}`)

// Resolve evaluates a template value (a scalar, !Ref, !GetAtt, !Sub in
// both forms, !Join) to a string.
func Resolve(n *yaml.Node, r Resolver) (string, error) {
	if n == nil {
		return "", nil
	}
	switch n.Tag {
	case "!Ref":
		return r.Ref(n.Value)
	case "!GetAtt":
		id, attr := "", ""
		if n.Kind == yaml.ScalarNode {
			id, attr, _ = cutDot(n.Value)
		} else if s := seq(n); len(s) == 2 {
			id, attr = s[0].Value, s[1].Value
		}
		return r.GetAtt(id, attr)
	case "!Sub":
		text, vars := n.Value, map[string]*yaml.Node{}
		if n.Kind == yaml.SequenceNode {
			s := seq(n)
			if len(s) != 2 {
				return "", fmt.Errorf("!Sub: want [string, map]")
			}
			text = s[0].Value
			for i := 0; i+1 < len(s[1].Content); i += 2 {
				vars[s[1].Content[i].Value] = s[1].Content[i+1]
			}
		}
		var firstErr error
		out := subVar.ReplaceAllStringFunc(text, func(m string) string {
			name := m[2 : len(m)-1]
			var v string
			var err error
			switch id, attr, dotted := cutDot(name); {
			case vars[name] != nil:
				v, err = Resolve(vars[name], r)
			case dotted && !strings.HasPrefix(name, "AWS::"):
				v, err = r.GetAtt(id, attr)
			default:
				v, err = r.Ref(name)
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
			return v
		})
		return out, firstErr
	case "!Join":
		s := seq(n)
		if len(s) != 2 {
			return "", fmt.Errorf("!Join: want [delimiter, list]")
		}
		var parts []string
		for _, p := range seq(s[1]) {
			v, err := Resolve(p, r)
			if err != nil {
				return "", err
			}
			parts = append(parts, v)
		}
		return strings.Join(parts, s[0].Value), nil
	}
	if n.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("line %d: cannot resolve a %s value", n.Line, kindName(n))
	}
	return n.Value, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	}
	return "scalar"
}

// Env returns function id's environment as Lambda would see it: Globals
// and the function's own variables, resolved through r.
func (t *Template) Env(id string, r Resolver) (map[string]string, error) {
	f, ok := t.Functions[id]
	if !ok {
		return nil, fmt.Errorf("no function %s in the template", id)
	}
	env := map[string]string{}
	for name, n := range f.envNodes {
		v, err := Resolve(n, r)
		if err != nil {
			return nil, fmt.Errorf("function %s: environment %s: %w", id, name, err)
		}
		env[name] = v
	}
	return env, nil
}

// ParameterValues returns every parameter's value: its default, or the
// override, each checked against the parameter's constraints as
// CloudFormation checks them before creating anything.
func (t *Template) ParameterValues(overrides map[string]string) (map[string]string, error) {
	out := map[string]string{}
	for name := range overrides {
		if _, ok := t.Parameters[name]; !ok {
			return nil, fmt.Errorf("parameter %s: not declared in the template", name)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.Parameters)) {
		p := t.Parameters[name]
		v, ok := overrides[name]
		if !ok {
			if !p.HasDefault {
				return nil, fmt.Errorf("parameter %s: no value and no default", name)
			}
			v = p.Default
		}
		if err := p.check(v); err != nil {
			return nil, fmt.Errorf("parameter %s: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

func (p Parameter) check(v string) error {
	if len(p.AllowedValues) > 0 {
		found := false
		for _, a := range p.AllowedValues {
			found = found || a == v
		}
		if !found {
			return fmt.Errorf("%q is not one of %v", v, p.AllowedValues)
		}
	}
	if p.Type == "Number" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("%q is not a number", v)
		}
		if p.MinValue != nil && f < *p.MinValue {
			return fmt.Errorf("%s is below MinValue %v", v, *p.MinValue)
		}
		if p.MaxValue != nil && f > *p.MaxValue {
			return fmt.Errorf("%s is above MaxValue %v", v, *p.MaxValue)
		}
	}
	return nil
}

func parseParameters(n *yaml.Node) map[string]Parameter {
	out := map[string]Parameter{}
	for i := 0; n != nil && i+1 < len(n.Content); i += 2 {
		pn := n.Content[i+1]
		p := Parameter{Type: scalar(get(pn, "Type"))}
		if d := get(pn, "Default"); d != nil {
			p.Default, p.HasDefault = d.Value, true
		}
		for _, a := range seq(get(pn, "AllowedValues")) {
			p.AllowedValues = append(p.AllowedValues, a.Value)
		}
		if v, err := strconv.ParseFloat(scalar(get(pn, "MinValue")), 64); err == nil {
			p.MinValue = &v
		}
		if v, err := strconv.ParseFloat(scalar(get(pn, "MaxValue")), 64); err == nil {
			p.MaxValue = &v
		}
		out[n.Content[i].Value] = p
	}
	return out
}
